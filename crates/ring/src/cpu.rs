//! Which kind of CPU this is, for the few choices between two ways of
//! doing one thing that measurement settled differently on Intel and AMD
//! (never a tuning constant): looked up once by `CPUID`, then a load.
//!
//! The choices: the bulk copy by vectors on AMD Zen 3 and later
//! ([`crate::bulk`]), and the inline copy of a reply beside the tail on
//! Intel (shmpipe-core's ends; docs/roundtrip.md, "The inline copy on
//! Intel").
//!
//! # Examples
//!
//! ```
//! use shmpipe_ring::cpu::{this, Vendor};
//!
//! let cpu = this();
//! if cpu.vendor == Vendor::Intel {
//!     println!("an Intel CPU of family {}", cpu.family);
//! }
//! assert_eq!(this(), cpu); // the same answer every time
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

/// Who made the CPU, as `CPUID` leaf 0 says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// "GenuineIntel".
    Intel,
    /// "AuthenticAMD", or Hygon's "HygonGenuine" (AMD Zen cores).
    Amd,
    /// Any other x86_64 maker, another architecture, or Miri.
    Other,
}

/// The CPU's vendor and family (base plus extended, as both vendors
/// count it: AMD Zen 3 and Zen 4 are 0x19, Zen 5 is 0x1a).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// Who made it.
    pub vendor: Vendor,
    /// Its family; 0 where unknown.
    pub family: u32,
}

impl Cpu {
    /// Whether this is an AMD Zen 3 or later (family 0x19 on).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::cpu::{Cpu, Vendor};
    ///
    /// assert!(Cpu { vendor: Vendor::Amd, family: 0x1a }.is_amd_zen3_or_later());
    /// assert!(!Cpu { vendor: Vendor::Amd, family: 0x17 }.is_amd_zen3_or_later());
    /// assert!(!Cpu { vendor: Vendor::Intel, family: 6 }.is_amd_zen3_or_later());
    /// ```
    pub fn is_amd_zen3_or_later(self) -> bool {
        self.vendor == Vendor::Amd && self.family >= 0x19
    }

    /// Packs into a word with a set bit 31, so that 0 can mean "not
    /// looked up yet".
    fn to_word(self) -> u32 {
        let vendor = match self.vendor {
            Vendor::Intel => 1,
            Vendor::Amd => 2,
            Vendor::Other => 3,
        };
        1 << 31 | vendor << 16 | (self.family & 0xffff)
    }

    fn from_word(word: u32) -> Cpu {
        let vendor = match (word >> 16) & 0xff {
            1 => Vendor::Intel,
            2 => Vendor::Amd,
            _ => Vendor::Other,
        };
        Cpu {
            vendor,
            family: word & 0xffff,
        }
    }
}

/// This CPU: `CPUID` at the first call, a load after.
#[inline]
pub fn this() -> Cpu {
    static THIS: AtomicU32 = AtomicU32::new(0);
    match THIS.load(Ordering::Relaxed) {
        0 => {
            let cpu = look_up();
            THIS.store(cpu.to_word(), Ordering::Relaxed);
            cpu
        }
        word => Cpu::from_word(word),
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[cold]
#[allow(unused_unsafe)] // `__cpuid` is safe from Rust 1.87 on, unsafe before
fn look_up() -> Cpu {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU; leaves 0 and 1 always.
    let (leaf0, leaf1) = unsafe { (__cpuid(0), __cpuid(1)) };
    let name = [leaf0.ebx, leaf0.edx, leaf0.ecx];
    let vendor = if name == [0x756e_6547, 0x4965_6e69, 0x6c65_746e] {
        Vendor::Intel // "GenuineIntel"
    } else if name == [0x6874_7541, 0x6974_6e65, 0x444d_4163] // "AuthenticAMD"
        || name == [0x6f67_7948, 0x6e65_476e, 0x656e_6975]
    // "HygonGenuine"
    {
        Vendor::Amd
    } else {
        Vendor::Other
    };
    let base = (leaf1.eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((leaf1.eax >> 20) & 0xff)
    } else {
        base
    };
    Cpu { vendor, family }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn look_up() -> Cpu {
    Cpu {
        vendor: Vendor::Other,
        family: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_survives_its_word() {
        for vendor in [Vendor::Intel, Vendor::Amd, Vendor::Other] {
            for family in [0, 6, 0x17, 0x19, 0x1a] {
                let cpu = Cpu { vendor, family };
                assert_eq!(Cpu::from_word(cpu.to_word()), cpu);
                assert_ne!(cpu.to_word(), 0);
            }
        }
    }

    #[test]
    fn the_look_up_agrees_with_the_kept_answer() {
        assert_eq!(this(), look_up());
        assert_eq!(this(), this());
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn the_vendor_is_the_one_proc_says() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let expected = if info.contains("GenuineIntel") {
            Vendor::Intel
        } else if info.contains("AuthenticAMD") || info.contains("HygonGenuine") {
            Vendor::Amd
        } else {
            Vendor::Other
        };
        assert_eq!(this().vendor, expected);
    }
}
