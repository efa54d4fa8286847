//! Examples live in examples/examples and examples/python.
