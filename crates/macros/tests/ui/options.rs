// An unknown option, and values of the wrong kind.
#[shmpipe::service(bogus = 1, version = "two", max_frame = 5000000000, crate = "rpc")]
pub trait Calc {
    fn add(&self, a: u32, b: u32) -> u32;
}

fn main() {}
