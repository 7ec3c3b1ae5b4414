mod names;
mod render;
fn main() {}
