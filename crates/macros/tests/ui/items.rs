// A service trait holds methods only.
#[shmpipe::service]
pub trait Config {
    const LIMIT: u32;
    type Key;
    fn get(&self, key: u32) -> u32;
}

fn main() {}
