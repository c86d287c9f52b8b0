//! How figures print: nanoseconds and ratios with the precision they
//! carry, alike in every table.

/// Nanoseconds with sensible precision.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::figures::fmt_ns;
///
/// assert_eq!(fmt_ns(2.5), "2.50");
/// assert_eq!(fmt_ns(49.97), "50.0");
/// assert_eq!(fmt_ns(2636.4), "2636");
/// ```
pub fn fmt_ns(ns: f64) -> String {
    if ns < 10.0 {
        format!("{ns:.2}")
    } else if ns < 100.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.0}")
    }
}

/// A ratio with sensible precision.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::figures::fmt_ratio;
///
/// assert_eq!(fmt_ratio(0.874), "0.87");
/// assert_eq!(fmt_ratio(44.43), "44.4");
/// assert_eq!(fmt_ratio(123.4), "123");
/// ```
pub fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}
