//! Two processes, one pipe: this program spawns itself as a child that
//! inherits the reader, then streams 8-byte items to it, one per write
//! call, and the child checks every one.
//!
//! ```text
//! cargo run --release -p shmpipe --example two_processes -- [ITEMS]
//! strace -f -c -o trace.txt target/release/examples/two_processes 1000000
//! PIN=cross target/release/examples/two_processes    # parent on CPU 0, child on CPU 1
//! ```
//!
//! Under `strace -c` the system-call count shows what the data path costs
//! the kernel: with both sides busy it is close to zero per item.

use std::io::{Read, Write};
use std::process::Command;

fn main() -> std::io::Result<()> {
    let items: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |s| s.parse().expect("ITEMS is a number"));
    let is_child = std::env::var_os("TWO_PROCESSES_CHILD").is_some();
    if std::env::var("PIN").as_deref() == Ok("cross") {
        let mut cpus = rustix::thread::CpuSet::new();
        cpus.set(usize::from(is_child));
        rustix::thread::sched_setaffinity(None, &cpus)?;
    }
    if is_child {
        return child(items);
    }
    let (mut reader, mut writer) = shmpipe::pipe()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(items.to_string()).env("TWO_PROCESSES_CHILD", "1");
    reader.pass_to(&mut cmd, "items")?;
    drop(reader);
    let mut child = cmd.spawn()?;
    drop(cmd); // closes our duplicates of the reader's descriptors
    let start = std::time::Instant::now();
    for i in 0..items {
        writer.write_all(&i.to_le_bytes())?;
    }
    drop(writer);
    let status = child.wait()?;
    let ns = start.elapsed().as_nanos() as f64 / items as f64;
    println!("{items} items, {ns:.1} ns per item, child {status}");
    Ok(())
}

fn child(items: u64) -> std::io::Result<()> {
    let mut reader = shmpipe::Reader::from_env("items")?;
    let mut buf = [0u8; 8];
    for i in 0..items {
        reader.read_exact(&mut buf)?;
        assert_eq!(u64::from_le_bytes(buf), i, "item {i} is wrong");
    }
    assert_eq!(reader.read(&mut buf)?, 0, "expected EOF");
    Ok(())
}
