//! kmirror control crate (work in progress).
