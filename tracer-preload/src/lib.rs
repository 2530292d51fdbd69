//! libtracer.so (placeholder while the interposition layer is written).
