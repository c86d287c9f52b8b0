//! `reread-4KiB-64KiB`, `reread-4KiB-1MiB`, `reread-4KiB-16MiB`: Iozone's
//! reread as SawMill measured it. Write a file, read it once, then time
//! the second sequential read in 4 KiB records into one user buffer (here
//! `n` records, going round the file as often as that takes).
//!
//! Contestants: `pread` (the kernel's page cache, one `pread(2)` per
//! record), `shmpipe-fileserver` (`shmpipe::fs` in a forked server
//! process, over shmpipe) and `unix-fileserver` (the same server and stubs
//! over a Unix socket). The first word of every record is checked in the
//! timed pass, and every byte once in an untimed pass after it.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shmpipe::fs::{Client, FileServiceServer, Server};
use shmpipe::rpc::{self, Transport, UnixTransport};

use crate::check::check_failed;
use crate::figures::fmt_ns;
use crate::job::{size_label, Mechanism, Placement, Test, REREAD_RECORD, REREAD_SIZES};
use crate::machine::Machine;
use crate::stats::Results;
use crate::sys;

/// The word at file offset `o` (a multiple of 8).
fn word(o: u64) -> u64 {
    (o / 8 + 1) ^ 0x5a5a_0000_0000_0000
}

/// A directory holding one test file of `size` bytes, removed on drop.
struct TestFile {
    dir: PathBuf,
    name: String,
}

impl TestFile {
    fn write(size: usize) -> io::Result<TestFile> {
        let dir = crate::rpc_null::sock_path("reread").with_extension("d");
        std::fs::create_dir_all(&dir)?;
        let name = format!("file-{size}");
        let mut data = vec![0u8; size];
        for (k, w) in data.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&word(k as u64 * 8).to_le_bytes());
        }
        std::fs::write(dir.join(&name), &data)?;
        Ok(TestFile { dir, name })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Checks the first word of a record read at `offset`.
#[inline(always)]
fn check_record(buf: &[u8], offset: u64) -> io::Result<()> {
    let got = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    if got == word(offset) {
        Ok(())
    } else {
        Err(record_failed(offset, got))
    }
}

#[cold]
#[inline(never)]
fn record_failed(offset: u64, got: u64) -> io::Error {
    check_failed(format!("reread: record at {offset} starts with {got:#x}"))
}

/// Checks every word of a whole pass.
fn check_all(buf: &[u8], offset: u64) -> io::Result<()> {
    for (k, w) in buf.chunks_exact(8).enumerate() {
        let o = offset + k as u64 * 8;
        let got = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if got != word(o) {
            return Err(record_failed(o, got));
        }
    }
    Ok(())
}

/// Something that reads a file's records in order.
trait Records {
    /// Reads record `i` (sequentially: `i` is the next record, or 0 after
    /// the last) into `buf`.
    fn record(&mut self, i: u64, buf: &mut [u8]) -> io::Result<()>;
}

struct Pread(File);

impl Records for Pread {
    #[inline(always)]
    fn record(&mut self, i: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = self.0.read_at(buf, i * REREAD_RECORD as u64)?;
        if n != buf.len() {
            return Err(check_failed(format!("pread gave {n} bytes")));
        }
        Ok(())
    }
}

struct Served<'a, T: Transport>(shmpipe::fs::File<'a, T>);

impl<T: Transport> Records for Served<'_, T> {
    #[inline(always)]
    fn record(&mut self, i: u64, buf: &mut [u8]) -> io::Result<()> {
        if i == 0 {
            self.0.seek(SeekFrom::Start(0))?;
        }
        self.0.read_exact(buf)
    }
}

/// The Iozone loop: one untimed pass, `n` timed records, one checked pass.
fn reread(r: &mut impl Records, size: usize, n: u64) -> io::Result<Duration> {
    let recs = (size / REREAD_RECORD) as u64;
    let mut buf = vec![0u8; REREAD_RECORD];
    for i in 0..recs {
        r.record(i, &mut buf)?;
        check_record(&buf, i * REREAD_RECORD as u64)?;
    }
    let start = Instant::now();
    let mut i = 0;
    for _ in 0..n {
        r.record(i, &mut buf)?;
        check_record(&buf, i * REREAD_RECORD as u64)?;
        i += 1;
        if i == recs {
            i = 0;
        }
    }
    let elapsed = start.elapsed();
    // Every byte, once, untimed; starting where the timed pass stopped.
    for _ in 0..recs {
        r.record(i, &mut buf)?;
        check_all(&buf, i * REREAD_RECORD as u64)?;
        i += 1;
        if i == recs {
            i = 0;
        }
    }
    Ok(elapsed)
}

/// Runs a reread test once with `n` timed records.
pub fn run(
    mechanism: Mechanism,
    placement: Placement,
    size: usize,
    n: u64,
) -> io::Result<Duration> {
    sys::pin(placement.cpu(0))?;
    let file = TestFile::write(size)?;
    let cpu = placement.cpu(1);
    let deadline = || Instant::now() + Duration::from_secs(10);
    let path = crate::rpc_null::sock_path("fs");
    match mechanism {
        Mechanism::Pread => reread(&mut Pread(File::open(file.path())?), size, n),
        Mechanism::ShmpipeFileserver => {
            let server = Server::new(&file.dir)?;
            let listener = Server::bind(&path)?;
            let mut child = sys::spawn(|| {
                sys::pin(cpu)?;
                let conn = listener.accept()?;
                rpc::Conn::new(FileServiceServer(server.session()), conn).serve()
            })?;
            let client = Client::connect(&path)?;
            drop(listener);
            let t = reread(&mut Served(client.open(&file.name)?), size, n)?;
            drop(client);
            child.wait(deadline())?;
            Ok(t)
        }
        Mechanism::UnixFileserver => {
            let server = Server::new(&file.dir)?;
            let listener = UnixListener::bind(&path)?;
            let mut child = sys::spawn(|| {
                sys::pin(cpu)?;
                let (stream, _) = listener.accept()?;
                rpc::Conn::unix(FileServiceServer(server.session()), stream)?.serve()
            })?;
            let client = Client::with_transport(UnixTransport::connect(&path)?)?;
            drop(listener);
            let _ = std::fs::remove_file(&path);
            let t = reread(&mut Served(client.open(&file.name)?), size, n)?;
            drop(client);
            child.wait(deadline())?;
            Ok(t)
        }
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "reread: not a file contestant",
        )),
    }
}

/// The reread tables, one per placement: a row per contestant and file
/// size, with ns per record, MB/s, cycles per record at the nominal
/// clock and the throughput against `pread`'s; the heads explained under.
pub fn table(machine: &Machine, results: &Results) -> String {
    use std::fmt::Write as _;
    let mechs = [
        Mechanism::Pread,
        Mechanism::ShmpipeFileserver,
        Mechanism::UnixFileserver,
    ];
    let mut out = String::new();
    for p in Placement::ALL {
        let rows: Vec<(Mechanism, usize)> = REREAD_SIZES
            .into_iter()
            .flat_map(|s| mechs.map(|m| (m, s)))
            .filter(|&(m, s)| results.get(m, Test::Reread(s), p).is_some())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\nreread (Iozone: the second sequential read of a file in 4 KiB records), {}",
            p.name()
        );
        let _ = writeln!(
            out,
            "{:<19} | {:>6} | {:>9} {:>7} {:>7} {:>8}",
            "mechanism", "file", "ns", "MB/s", "cycles", "x pread"
        );
        for (m, s) in rows {
            let t = Test::Reread(s);
            let Some(x) = results.get(m, t, p) else {
                continue;
            };
            let mbs = REREAD_RECORD as f64 / x.median_ns * 1e3;
            let cycles = machine
                .cpu_mhz
                .map_or("-".into(), |mhz| format!("{:.0}", x.median_ns * mhz / 1e3));
            let vs = results
                .get(Mechanism::Pread, t, p)
                .map_or("-".into(), |r| format!("{:.2}", r.median_ns / x.median_ns));
            let _ = writeln!(
                out,
                "{:<19} | {:>6} | {:>9} {mbs:>7.0} {cycles:>7} {vs:>8}",
                m.name(),
                size_label(s),
                fmt_ns(x.median_ns),
            );
        }
    }
    if !out.is_empty() {
        let clock = machine
            .cpu_mhz
            .map_or("no nominal clock known here".into(), |m| {
                format!("at the nominal {m:.0} MHz")
            });
        let _ = writeln!(
            out,
            "  file: its size; ns: the median per 4 KiB record; MB/s: megabytes read per second;\n  \
             cycles: per record, {clock};\n  \
             x pread: this throughput over pread's (the kernel's page cache; above 1 is faster)."
        );
    }
    out
}
