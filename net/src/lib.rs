//! kmirror net crate (work in progress).
pub mod groups;
