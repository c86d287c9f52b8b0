// The client's functions share one namespace: a method may not take a
// constructor's name, nor the name of another method's companion.

#[shmpipe::service]
trait Reserved {
    fn new(&self) -> u32;
    fn connect(&self);
}

#[shmpipe::service]
trait Companions {
    fn send_add(&self, x: u32);
    fn add(&self, a: u32, b: u32) -> u32;
    fn try_sub(&self) -> u32;
    fn sub(&self) -> u32;
}

fn main() {}
