//! Benchmark helpers: the SVG charts the end-to-end harnesses write beside their tables.

pub mod charts;
