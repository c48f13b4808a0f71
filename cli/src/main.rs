//! `ferry`: the one binary.

fn main() {
    println!("ferry");
}
