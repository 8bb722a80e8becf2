//! The kmirror binary.
fn main() {
    println!("kmirror");
}
