//! Round trips between two processes: this program spawns itself as an
//! echo child over two message pipes and reports the median round trip.
//!
//! ```text
//! cargo run --release -p shmpipe --example ping_pong -- [ROUNDS] [SPIN_US]
//! taskset -c 0 target/release/examples/ping_pong     # both on one core
//! PIN=cross target/release/examples/ping_pong         # parent on CPU 0, child on CPU 1
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(200_000, |s| s.parse().expect("ROUNDS"));
    let spin = args.next().map_or(shmpipe::DEFAULT_SPIN, |s| {
        Duration::from_micros(s.parse().expect("SPIN_US"))
    });
    let child = std::env::var_os("PING_PONG_CHILD").is_some();
    if std::env::var("PIN").as_deref() == Ok("cross") {
        let mut cpus = rustix::thread::CpuSet::new();
        cpus.set(usize::from(child));
        rustix::thread::sched_setaffinity(None, &cpus)?;
    }
    if child {
        let mut rx = shmpipe::Receiver::from_env("ping")?;
        let mut tx = shmpipe::Sender::from_env("pong")?;
        rx.set_spin(spin);
        tx.set_spin(spin);
        let mut buf = [0u8; 8];
        while let Ok(n) = rx.recv(&mut buf) {
            tx.send(&buf[..n])?;
        }
        return Ok(());
    }
    let opts = shmpipe::Options::new().spin(spin).clone();
    let (mut ping_rx, mut ping_tx) = opts.message_pipe()?;
    let (mut pong_rx, mut pong_tx) = opts.message_pipe()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([rounds.to_string(), spin.as_micros().to_string()])
        .env("PING_PONG_CHILD", "1");
    ping_rx.pass_to(&mut cmd, "ping")?;
    pong_tx.pass_to(&mut cmd, "pong")?;
    drop((ping_rx, pong_tx));
    let mut child = cmd.spawn()?;
    drop(cmd);
    let mut times = Vec::with_capacity(rounds);
    let mut buf = [0u8; 8];
    for i in 0..rounds as u64 {
        let t = Instant::now();
        ping_tx.send(&i.to_le_bytes())?;
        pong_rx.recv(&mut buf)?;
        times.push(t.elapsed());
        assert_eq!(u64::from_le_bytes(buf), i);
    }
    drop(ping_tx);
    child.wait()?;
    times.sort();
    let pct = |p: usize| times[times.len() * p / 100].as_nanos();
    println!(
        "{rounds} round trips: median {} ns, p10 {} ns, p90 {} ns, p99 {} ns",
        pct(50),
        pct(10),
        pct(90),
        pct(99)
    );
    Ok(())
}
