// Every method takes `&self`: not nothing, `&mut self` or `self`.
#[shmpipe::service]
pub trait Counter {
    fn add(n: u32) -> u32;
    fn bump(&mut self);
    fn take(self) -> u64;
}

fn main() {}
