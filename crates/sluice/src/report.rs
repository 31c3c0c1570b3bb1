//! Output shared by every benchmark: aligned text tables, CSV files, SVG line plots, JSON
//! lines and a progress bar that stays out of the way of machine-readable output.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// A text table with a header row; columns are right-aligned except the first ones.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left_columns: usize,
}

impl Table {
    /// A table with these column titles; the first `left_columns` are left-aligned.
    pub fn new(header: Vec<String>, left_columns: usize) -> Self {
        Table {
            header,
            rows: Vec::new(),
            left_columns,
        }
    }

    /// Append a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Render with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for (n, r) in std::iter::once(&self.header).chain(&self.rows).enumerate() {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(cols) {
                if i > 0 {
                    line.push_str("  ");
                }
                if i < self.left_columns {
                    let _ = write!(line, "{c:<w$}", w = width[i]);
                } else {
                    let _ = write!(line, "{c:>w$}", w = width[i]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if n == 0 {
                let total: usize = width.iter().sum::<usize>() + 2 * (cols - 1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }
}

/// Write `rows` under `header` as CSV; a field with a comma, a quote or a line break is
/// quoted, its quotes doubled (RFC 4180).
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut s = csv_line(header);
    for r in rows {
        s.push_str(&csv_line(r));
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// One CSV line of `fields`, each quoted if it needs to be.
fn csv_line(fields: &[impl AsRef<str>]) -> String {
    let quoted: Vec<String> = fields.iter().map(|f| csv_field(f.as_ref())).collect();
    quoted.join(",") + "\n"
}

/// One CSV field, quoted if it needs to be.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// Make sure `dir`, given by `flag`, can take the report's files before anything is measured:
/// create it if it is missing and write (then remove) a probe file in it, so that a bad
/// directory fails the run in a second instead of after its measurements.
pub fn prepare_out(dir: &Path, flag: &str) -> anyhow::Result<()> {
    let fail = |e: std::io::Error| anyhow::anyhow!("{flag} {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".sluice-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// [`prepare_out`], then make sure each of `files` (names in `dir`) can be replaced: one that
/// exists must be a regular file this process may write (opened for writing, not truncated),
/// so that a directory or a read-only file in the way fails the run before its measurements
/// instead of after them.
pub fn prepare_out_files(dir: &Path, flag: &str, files: &[&str]) -> anyhow::Result<()> {
    prepare_out(dir, flag)?;
    for name in files {
        let path = dir.join(name);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // not there: the probe showed that the directory takes new files
        };
        if !meta.is_file() {
            let what = if meta.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            anyhow::bail!(
                "{flag} {}: {what}, where the report writes a file; move it or choose another {flag}",
                path.display()
            );
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
    }
    Ok(())
}

/// One line of a plot: a label and its (x, y) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in any order (a line joins them in x order).
    pub points: Vec<(f64, f64)>,
}

/// One panel of a plot.
pub struct Panel {
    /// Panel title.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Draw panels side by side as log-log line charts into an SVG file.
pub fn plot_loglog(
    path: &Path,
    panels: &[Panel],
    x_label: &str,
    y_label: &str,
) -> anyhow::Result<()> {
    // plotters' errors name neither the file nor what was being done.
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("writing {}: {e}", path.display());
    let width = 560 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let pts = panel.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            continue;
        }
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(
                (x0 * 0.8..x1 * 1.25).log_scale(),
                (y0 * 0.7..y1 * 1.5).log_scale(),
            )
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|x| format!("{x:.0e}"))
            .draw()
            .map_err(|e| fail(&e))?;
        for (i, s) in panel.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            // A line joins its points left to right, whatever order the sizes were given in.
            let mut points = s.points.clone();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| fail(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(total: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Round to `digits` significant digits for JSON output, for figures that span orders of
/// magnitude (a throughput of 0.031 Mpps must not print as 0.0).
pub fn significant(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let shift = digits - 1 - x.abs().log10().floor() as i32;
    // Multiply and divide by exact powers of ten on the side that keeps them whole.
    if shift >= 0 {
        let f = 10f64.powi(shift);
        (x * f).round() / f
    } else {
        let f = 10f64.powi(-shift);
        (x / f).round() * f
    }
}

/// Round to one decimal for JSON output.
pub fn one_decimal(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(vec!["name".into(), "ns".into()], 1);
        t.row(vec!["cffs".into(), "31.2".into()]);
        t.row(vec!["binary_heap".into(), "333.0".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "name            ns");
        assert_eq!(lines[2], "cffs          31.2");
        assert_eq!(lines[3], "binary_heap  333.0");
    }

    #[test]
    fn an_unusable_out_dir_is_named_with_its_flag() {
        let dir = std::env::temp_dir().join(format!("sluice-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let err = prepare_out(&file.join("sub"), "--out")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--out "), "{err}");
        assert!(err.contains("a-file/sub"), "{err}");
        prepare_out(&dir.join("new"), "--out").unwrap();
        assert_eq!(std::fs::read_dir(dir.join("new")).unwrap().count(), 0);
        let svg = dir.join("plot.svg");
        std::fs::create_dir_all(&svg).unwrap();
        let panel = Panel {
            title: "t".into(),
            series: vec![Series {
                label: "s".into(),
                points: vec![(1.0, 1.0), (10.0, 2.0)],
            }],
        };
        let err = plot_loglog(&svg, &[panel], "x", "y")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("writing {}", svg.display())),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A field with a comma, a quote or a line break is quoted (RFC 4180), so that every row
    /// keeps its columns whatever a caller passes (the memory table's states have commas,
    /// which `bench flow` turns into semicolons itself, and its CSV keeps that form).
    #[test]
    fn csv_fields_with_commas_quotes_or_line_breaks_are_quoted() {
        let dir = std::env::temp_dir().join(format!("sluice-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        write_csv(
            &path,
            &["state", "n"],
            &[
                vec!["record (admission, queue)".into(), "1".into()],
                vec!["a \"quoted\" word".into(), "2".into()],
                vec!["two\nlines".into(), "".into()],
                vec!["plain".into(), "3.5".into()],
            ],
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            text,
            "state,n\n\"record (admission, queue)\",1\n\"a \"\"quoted\"\" word\",2\n\
             \"two\nlines\",\nplain,3.5\n"
        );
    }

    /// Sizes given out of order (`--n 1e4,100,1e3`) keep the tables in that order, but a plot
    /// line joins its points in x order: it went back and forth across the panel.
    #[test]
    fn plot_lines_join_their_points_in_x_order() {
        let dir = std::env::temp_dir().join(format!("sluice-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("plot.svg");
        let panel = Panel {
            title: "t".into(),
            series: vec![Series {
                label: "s".into(),
                points: vec![(1e4, 30.0), (100.0, 10.0), (1e3, 20.0)],
            }],
        };
        plot_loglog(&svg, &[panel], "x", "y").unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // The series' line: the only polyline of stroke width 2 with three points.
        let line = text
            .lines()
            .filter(|l| l.contains("<polyline") && l.contains("stroke-width=\"2\""))
            .filter_map(|l| l.split("points=\"").nth(1)?.split('"').next())
            .find(|p| p.split_whitespace().count() == 3)
            .unwrap_or_else(|| panic!("no line of three points in {text}"));
        let xs: Vec<i64> = line
            .split_whitespace()
            .map(|xy| xy.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{line}");
    }

    #[test]
    fn significant_keeps_small_and_large_figures_readable() {
        assert_eq!(significant(0.031_23, 3), 0.0312);
        assert_eq!(significant(12.53, 3), 12.5);
        assert_eq!(significant(1234.5, 3), 1230.0);
        assert_eq!(significant(0.0004, 3), 0.0004);
        assert_eq!(significant(0.0, 3), 0.0);
    }

    #[test]
    fn one_decimal_rounds() {
        assert_eq!(one_decimal(31.24), 31.2);
        assert_eq!(one_decimal(31.25), 31.3);
    }
}
