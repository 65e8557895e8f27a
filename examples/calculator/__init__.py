"""The calculator example: a recursive model over arithmetic expression trees."""
