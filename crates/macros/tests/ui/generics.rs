// Generic or async methods have no stub: the wire carries fixed types,
// and the stubs block.
#[shmpipe::service]
pub trait Convert {
    fn convert<T: Copy>(&self, x: T) -> T;
    async fn slow(&self) -> u32;
}

#[shmpipe::service]
pub trait Holder<T> {
    fn get(&self) -> u32;
}

fn main() {}
