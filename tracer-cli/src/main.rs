fn main() {
    println!("tracer: not yet");
}
