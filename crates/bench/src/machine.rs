//! What machine the figures come from: CPU model with vendor, family, model
//! and stepping (a hypervisor often shows only "AMD EPYC" as the model name,
//! which does not tell two generations apart), the nominal clock, cores,
//! kernel, whether it is virtualised, the frequency governor.

use serde_json::{json, Value};

/// A description of the machine, read from `/proc` and `/sys`.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `vendor_id` from `/proc/cpuinfo` (`GenuineIntel`, `AuthenticAMD`).
    pub cpu_vendor: String,
    /// `cpu family`, `model` and `stepping` from `/proc/cpuinfo`, where
    /// given (x86 reports all three).
    pub cpu_family: Option<u32>,
    /// See `cpu_family`.
    pub cpu_model_number: Option<u32>,
    /// See `cpu_family`.
    pub cpu_stepping: Option<u32>,
    /// The nominal clock in MHz (`cpu MHz` of the first CPU, which on a
    /// KVM guest with a known TSC frequency is that frequency): the factor
    /// that turns nanoseconds into the cycles older papers report.
    pub cpu_mhz: Option<f64>,
    /// CPUs online.
    pub cores: usize,
    /// `uname -sr`.
    pub kernel: String,
    /// Whether the CPU reports running under a hypervisor.
    pub virtualised: bool,
    /// The hypervisor, where it can be read.
    pub hypervisor: Option<String>,
    /// The cpufreq governor of CPU 0, where it can be read.
    pub governor: Option<String>,
    /// The versions of the peer crates measured (feature `peers`).
    pub peers: Vec<(String, String)>,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The peer crates built into this binary (feature `peers`), with the
/// versions Cargo.toml pins.
fn peer_versions() -> Vec<(String, String)> {
    if cfg!(feature = "peers") {
        vec![
            ("iceoryx2".into(), "0.10.0".into()),
            ("shmem-ipc".into(), "0.3.0".into()),
        ]
    } else {
        Vec::new()
    }
}

impl Machine {
    /// Reads the description of this machine.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let cpu_model = field("model name").unwrap_or_else(|| "unknown".into());
        let number = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok());
        let virtualised =
            field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"));
        let hypervisor = crate::sys::hypervisor_signature()
            .filter(|s| !s.is_empty())
            .or_else(|| read_trimmed("/sys/hypervisor/type"));
        let virtualised = virtualised || hypervisor.is_some();
        let kernel = format!(
            "{} {}",
            read_trimmed("/proc/sys/kernel/ostype").unwrap_or_else(|| "Linux".into()),
            read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into())
        );
        Self {
            cpu_model,
            cpu_vendor: field("vendor_id").unwrap_or_else(|| "unknown".into()),
            cpu_family: number("cpu family"),
            cpu_model_number: number("model"),
            cpu_stepping: number("stepping"),
            cpu_mhz: field("cpu MHz").and_then(|v| v.parse::<f64>().ok()),
            cores: crate::sys::online_cpus(),
            kernel,
            virtualised,
            hypervisor,
            governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            peers: peer_versions(),
        }
    }

    /// The CPU in full: model name, then vendor, family, model and stepping
    /// and the nominal clock, so figures from two machines whose model
    /// names read alike can be told apart.
    ///
    /// # Examples
    ///
    /// ```
    /// let cpu = shmpipe_bench::Machine::detect().cpu();
    /// assert!(!cpu.is_empty());
    /// ```
    pub fn cpu(&self) -> String {
        let mut s = format!("{} ({}", self.cpu_model, self.cpu_vendor);
        let ids = [
            ("family", self.cpu_family),
            ("model", self.cpu_model_number),
            ("stepping", self.cpu_stepping),
        ];
        for (name, value) in ids {
            if let Some(v) = value {
                s.push_str(&format!(" {name} {v}"));
            }
        }
        if let Some(mhz) = self.cpu_mhz {
            s.push_str(&format!(", {mhz:.0} MHz"));
        }
        s.push(')');
        s
    }

    /// One line for the head of a table.
    pub fn line(&self) -> String {
        let virt = match (&self.hypervisor, self.virtualised) {
            (Some(h), _) => format!("virtualised ({h})"),
            (None, true) => "virtualised".into(),
            (None, false) => "not virtualised".into(),
        };
        format!(
            "{}, {} cores, {}, {virt}, governor: {}",
            self.cpu(),
            self.cores,
            self.kernel,
            self.governor.as_deref().unwrap_or("not readable")
        )
    }

    /// The `"machine"` object of `--json`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "cpu_model": self.cpu_model,
            "cpu_vendor": self.cpu_vendor,
            "cpu_family": self.cpu_family,
            "cpu_model_number": self.cpu_model_number,
            "cpu_stepping": self.cpu_stepping,
            "cpu_mhz": self.cpu_mhz,
            "cpu": self.cpu(),
            "cores": self.cores,
            "kernel": self.kernel,
            "virtualised": self.virtualised,
            "hypervisor": self.hypervisor,
            "governor": self.governor,
        });
        if !self.peers.is_empty() {
            v["peer_versions"] = self
                .peers
                .iter()
                .map(|(k, ver)| (k.clone(), Value::from(ver.clone())))
                .collect();
        }
        v
    }
}
