// Parameters that cannot travel: a reference other than `&[u8]`, `&str`
// or `&mut [u8]`, a `Result`, `()`.
#[shmpipe::service]
pub trait Store {
    fn get(&self, key: &u32) -> u64;
    fn put(&self, value: Result<u32, u8>);
    fn nothing(&self, unit: ()) -> u8;
}

fn main() {}
