"""A warning names the user's line, also when a thread of the library issues it."""

from __future__ import annotations

import sys
import threading
import warnings

from refold.callsite import user_line, user_stacklevel, warn


def test_a_warning_from_the_users_code_names_its_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("here"); line = sys._getframe().f_lineno  # noqa: E702
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
    assert user_stacklevel() == 1   # the test is not library code


def test_a_warning_on_another_thread_names_the_line_taken_before():
    at = user_line(); line = sys._getframe().f_lineno  # noqa: E702
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=warn, args=("from a thread",), kwargs={"at": at})
        thread.start()
        thread.join()
    assert [(w.filename, w.lineno, str(w.message)) for w in caught] == [
        (__file__, line, "from a thread")]


def test_a_warning_at_the_user_s_line_works_in_a_python_c_program():
    """A `python -c` program's module has no loader that gives its source: the warning
    is still issued, at its line, and nothing raises."""
    import subprocess
    import sys
    code = ("from refold.callsite import user_line, warn\n"
            "warn('skipped', at=user_line())\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "done" and "<string>:2: UserWarning: skipped" in out.stderr
