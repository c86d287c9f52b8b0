//! What machine the figures come from: CPU model, cores, kernel, whether it
//! is virtualised, the frequency governor.

use serde_json::{json, Value};

/// A description of the machine, read from `/proc` and `/sys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
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
            cores: crate::sys::online_cpus(),
            kernel,
            virtualised,
            hypervisor,
            governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            peers: crate::peers::versions(),
        }
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
            self.cpu_model,
            self.cores,
            self.kernel,
            self.governor.as_deref().unwrap_or("not readable")
        )
    }

    /// The `"machine"` object of `--json`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "cpu_model": self.cpu_model,
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
