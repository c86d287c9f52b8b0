//! Charts of the size sweeps: round-trip latency and bandwidth against
//! message size, one line per contestant, one chart per placement.
//!
//! PNG when a TrueType font can be found on the machine (plotters needs
//! one to draw text into a bitmap), SVG otherwise.

use std::io;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::job::{Job, Mechanism, Placement, Test, SERVE_CLIENTS, SWEEP};
use crate::stats::Results;

const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a system font for bitmap output; false if none was found.
fn register_font() -> bool {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DONE.get_or_init(|| {
        for path in FONTS {
            if let Ok(bytes) = std::fs::read(path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("plot: {e}"))
}

/// Distinct colours that read on white; shmpipe gets the first.
const COLORS: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
];

/// Axis labels at powers of ten: `10 B`, `1 kB`, `1 MB`.
fn decimal_bytes(x: f64) -> String {
    let x = x.round();
    if x >= 1e6 {
        format!("{} MB", x / 1e6)
    } else if x >= 1e3 {
        format!("{} kB", x / 1e3)
    } else {
        format!("{x} B")
    }
}

/// Lines of a chart: a contestant and its points.
pub type Series = Vec<(Mechanism, Vec<(f64, f64)>)>;

fn series(results: &Results, placement: Placement, latency: bool) -> Series {
    Mechanism::ALL
        .into_iter()
        .filter_map(|m| {
            let pts: Vec<(f64, f64)> = SWEEP
                .into_iter()
                .filter_map(|s| {
                    let t = if latency {
                        Test::RoundTrip(s)
                    } else {
                        Test::Bandwidth(s)
                    };
                    let x = results.get(m, t, placement)?;
                    let y = if latency {
                        x.median_ns / 1000.0
                    } else {
                        x.gbps()?
                    };
                    Some((s as f64, y))
                })
                .collect();
            (pts.len() >= 2).then_some((m, pts))
        })
        .collect()
}

/// The `serve-*` chart's lines: ns per message against clients, per
/// contestant, cross-core.
fn serve_series(results: &Results) -> Series {
    Mechanism::ALL
        .into_iter()
        .filter_map(|m| {
            let pts: Vec<(f64, f64)> = SERVE_CLIENTS
                .iter()
                .filter_map(|&c| {
                    let s = results.get(m, Test::Serve(c), Placement::CrossCore)?;
                    Some((c as f64, s.median_ns))
                })
                .collect();
            (pts.len() >= 2).then_some((m, pts))
        })
        .collect()
}

/// A chart's x axis: its range (log scale), name and labels.
struct XAxis {
    range: (f64, f64),
    desc: &'static str,
    fmt: fn(&f64) -> String,
}

/// Message sizes, 8 B to 1 MiB.
const SIZES: XAxis = XAxis {
    range: (6.0, 1.5e6),
    desc: "message size (bytes)",
    fmt: |x| decimal_bytes(*x),
};

/// Client counts, 1 to 1000.
const CLIENT_COUNTS: XAxis = XAxis {
    range: (0.7, 1500.0),
    desc: "clients (8 active)",
    fmt: |x| format!("{}", x.round()),
};

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    data: &Series,
    x: &XAxis,
) -> io::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let ys = data.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y));
    let (lo, hi) = ys.fold((f64::INFINITY, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = ((lo / 2.0).max(1e-4), hi * 2.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((x.range.0..x.range.1).log_scale(), (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc(y_label)
        .x_label_formatter(&x.fmt)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    for (i, (m, pts)) in data.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        let width = if matches!(m, Mechanism::Shmpipe) {
            3
        } else {
            2
        };
        chart
            .draw_series(LineSeries::new(
                pts.iter().copied(),
                color.stroke_width(width),
            ))
            .map_err(err)?
            .label(m.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Checks, before a run, that `--plot DIR` can hold charts: whether the
/// jobs draw any (a chart needs a contestant at two sizes of the sweep,
/// or at two client counts of `serve-N`), and whether `dir` can be
/// created and written. The errors name the folder and what to do.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::{plot, Config};
///
/// let jobs: Vec<_> = Config::quick().select()?.into_iter().flatten().collect();
/// let dir = std::env::temp_dir().join(format!("plot-check-{}", std::process::id()));
/// plot::check_dir(&dir, &jobs)?;
/// std::fs::remove_dir(&dir)?;
/// assert!(plot::check_dir("/proc/nope".as_ref(), &jobs).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn check_dir(dir: &Path, jobs: &[Job]) -> io::Result<()> {
    let charted = |j: &&Job| match j.test {
        Test::RoundTrip(s) | Test::Bandwidth(s) => SWEEP.contains(&s),
        Test::Serve(_) => true,
        _ => false,
    };
    let drawn = jobs.iter().filter(charted).any(|a| {
        jobs.iter().filter(charted).any(|b| {
            a.mechanism == b.mechanism
                && a.placement == b.placement
                && a.test != b.test
                && matches!(
                    (a.test, b.test),
                    (Test::RoundTrip(_), Test::RoundTrip(_))
                        | (Test::Bandwidth(_), Test::Bandwidth(_))
                        | (Test::Serve(_), Test::Serve(_))
                )
        })
    });
    if !drawn {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--plot {}: these jobs draw no chart (charts need the size sweep or serve-N): \
                 drop --no-sweep, or filter for `roundtrip`, `bandwidth` or `serve`",
                dir.display()
            ),
        ));
    }
    let cannot = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("--plot {}: cannot write charts there: {e}", dir.display()),
        )
    };
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let probe = dir.join(format!(".shmpipe-bench-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)
}

/// Writes `latency-<placement>` and `bandwidth-<placement>` charts into
/// `dir` for every placement with a sweep. Returns the files written.
pub fn write_charts(dir: &Path, results: &Results) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let png = register_font();
    let mut written = Vec::new();
    for p in Placement::ALL {
        for latency in [true, false] {
            let data = series(results, p, latency);
            if data.is_empty() {
                continue;
            }
            let (kind, title, y) = if latency {
                (
                    "latency",
                    format!("Round trip vs message size, {}", p.name()),
                    "round trip (µs)",
                )
            } else {
                (
                    "bandwidth",
                    format!("Bandwidth vs write size, {}", p.name()),
                    "GB/s",
                )
            };
            let size = (900, 560);
            let path = dir.join(format!(
                "{kind}-{}.{}",
                p.name(),
                if png { "png" } else { "svg" }
            ));
            if png {
                draw(
                    BitMapBackend::new(&path, size).into_drawing_area(),
                    &title,
                    y,
                    &data,
                    &SIZES,
                )?;
            } else {
                draw(
                    SVGBackend::new(&path, size).into_drawing_area(),
                    &title,
                    y,
                    &data,
                    &SIZES,
                )?;
            }
            written.push(path);
        }
    }
    // Cost per message against the number of clients (`serve-*`).
    let data = serve_series(results);
    if !data.is_empty() {
        let title = "Server cost per message vs clients, cross-core";
        let y = "ns per message handled";
        let size = (900, 560);
        let path = dir.join(format!(
            "serve-cross-core.{}",
            if png { "png" } else { "svg" }
        ));
        if png {
            let area = BitMapBackend::new(&path, size).into_drawing_area();
            draw(area, title, y, &data, &CLIENT_COUNTS)?;
        } else {
            let area = SVGBackend::new(&path, size).into_drawing_area();
            draw(area, title, y, &data, &CLIENT_COUNTS)?;
        }
        written.push(path);
    }
    Ok(written)
}
