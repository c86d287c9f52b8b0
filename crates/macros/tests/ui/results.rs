// Results cannot borrow (not even inside a `Result`), and a `Result`
// does not nest.
#[shmpipe::service]
pub trait Names {
    fn name(&self, id: u32) -> &str;
    fn bytes(&self, id: u32) -> Result<&[u8], u32>;
    fn nested(&self) -> Result<Result<u8, u8>, u8>;
}

fn main() {}
