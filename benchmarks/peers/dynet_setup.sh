#!/bin/bash
# Build DyNet 2.1.2 (CPU/Eigen backend) from the PyPI source tarball, offline,
# into the venv $PEERS_HOME/dynetvenv.  Takes ~8 minutes on 2 cores; `python -m benchmarks.peers` tells you to run it.
#  - Eigen: Debian's libeigen3-dev 3.4.0 works unpatched (setup.py would otherwise try
#    to download an Eigen snapshot from github.com/clab/dynet/releases, which is
#    unreachable here; pointing EIGEN3_INCLUDE_DIR at Debian's eigen3 include folder skips that).
#  - Cython must be < 3 (0.29.x); Python 3.11 still has distutils (setup.py uses it).
#  - We drive CMake ourselves and then build a wheel from the built tree, because
#    `setup.py install` produces a zipped egg whose _dynet stub does not load on
#    Python 3.11 (`NameError: name 'init' is not defined` on `import dynet`).
set -e
PEERS_HOME=${PEERS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/refold-peers}
DL=${DL:-$PEERS_HOME/dl}
SRC=${SRC:-$PEERS_HOME/dynet_build}
V=${V:-$PEERS_HOME/dynetvenv}
apt-get update && apt-get install -y libeigen3-dev cmake build-essential
python3 -m venv $V
$V/bin/pip install "cython<3" numpy wheel "setuptools<70"
apt-get install -y pkg-config >/dev/null; EIGEN=$(pkg-config --variable=includedir eigen3 2>/dev/null || true)/eigen3; [ -f "$EIGEN/Eigen/Core" ] || EIGEN=/usr/include/eigen3
mkdir -p $SRC $DL && cd $SRC
[ -f $DL/dyNET-2.1.2.tar.gz ] || $V/bin/pip download --no-deps dynet==2.1.2 -d $DL
tar xzf $DL/dyNET-2.1.2.tar.gz
mkdir -p build && cd build
cmake ../dyNET-2.1.2 -DEIGEN3_INCLUDE_DIR=$EIGEN -DPYTHON=$V/bin/python -DCMAKE_INSTALL_PREFIX=$V
make -j2            # builds libdynet.so and, via setup.py build_ext, python/_dynet*.so
make install        # libdynet.so -> $V/lib, headers -> $V/include
cd python
$V/bin/python ../../dyNET-2.1.2/setup.py EIGEN3_INCLUDE_DIR=$EIGEN \
    build --build-dir=.. --skip-build bdist_wheel -d $DL/wheel
$V/bin/pip install --no-deps --force-reinstall $DL/wheel/dyNET-2.1.2-cp311-cp311-linux_x86_64.whl
cd $PEERS_HOME && $V/bin/python -c "import dynet as dy; m=dy.ParameterCollection(); p=m.add_parameters((2,3)); dy.renew_cg(); print('dynet OK', (p*dy.inputVector([1,2,3])).npvalue())"
