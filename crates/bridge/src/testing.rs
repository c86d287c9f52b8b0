//! What the bridge's tests and `shmpipe bench`'s bridge rows share:
//! throw-away mutual-TLS certificates and children killed on drop. Not
//! part of the API.

use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Children killed (and reaped) on drop, so that a failing test or bench
/// leaves no bridge or server behind.
///
/// # Examples
///
/// ```
/// let mut procs = shmpipe_bridge::testing::Procs::default();
/// procs.0.push(std::process::Command::new("sleep").arg("60").spawn().unwrap());
/// drop(procs); // the sleep is killed
/// ```
#[derive(Debug, Default)]
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| io::Error::new(e.kind(), format!("openssl (apt-get install openssl): {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {} failed",
            args.join(" ")
        )))
    }
}

/// Makes, in `dir`, a CA `CA-ca.pem` (key `CA-ca.key`) valid for two
/// days, and for each name in `who` a certificate `NAME.pem` (key
/// `NAME.key`) of that CA whose common name is `NAME`, good for serving
/// and connecting at 127.0.0.1, `localhost` and each address in `ips`.
///
/// # Errors
///
/// `openssl` is missing or fails, or `dir` cannot be written.
///
/// # Examples
///
/// ```no_run
/// let dir = std::env::temp_dir().join("certs");
/// std::fs::create_dir_all(&dir)?;
/// shmpipe_bridge::testing::certificates(&dir, "test", &["10.0.0.1"], &["server", "client"])?;
/// assert!(dir.join("test-ca.pem").exists() && dir.join("client.key").exists());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn certificates(dir: &Path, ca: &str, ips: &[&str], who: &[&str]) -> io::Result<()> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_key, ca_pem, ca_subj, ext) = (
        format!("{ca}-ca.key"),
        format!("{ca}-ca.pem"),
        format!("/CN={ca} test CA"),
        format!("{ca}.ext"),
    );
    let mut req = vec!["req", "-x509"];
    req.extend(ec);
    req.extend([
        "-keyout", &ca_key, "-out", &ca_pem, "-days", "2", "-subj", &ca_subj,
    ]);
    req.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    req.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &req)?;
    let names: String = ips.iter().map(|ip| format!("IP:{ip},")).collect();
    std::fs::write(
        dir.join(&ext),
        format!(
            "subjectAltName={names}IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
        ),
    )?;
    for w in who {
        let (key, csr, pem, subj) = (
            format!("{w}.key"),
            format!("{w}.csr"),
            format!("{w}.pem"),
            format!("/CN={w}"),
        );
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req)?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        )?;
    }
    Ok(())
}
