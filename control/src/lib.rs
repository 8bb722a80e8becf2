//! kmirror control crate (work in progress).
pub mod metadata;
pub mod mirror;
