//! kmirror net crate (work in progress).
pub mod groups;
pub mod keys;
pub mod mirror_api;
pub mod client;
pub mod mirror_fetcher;
