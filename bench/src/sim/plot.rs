//! PNG line charts of the grid and of the failure experiments, drawn with plotters' bitmap
//! backend.
//!
//! Text needs a font: plotters' `ab_glyph` backend renders a TrueType file registered at run
//! time, found among common system paths (or `PGTIER_SIM_FONT`). Without one, plots are
//! skipped with a message and the CSV files remain the results.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label; also picks the colour.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// One chart of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Title above the chart.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Lines.
    pub series: Vec<Series>,
    /// Labels for integer x positions (categorical axes such as phases); empty for numeric.
    pub x_categories: Vec<String>,
}

const FONT_CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a font once; Err says why plots cannot be drawn.
fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let from_env = std::env::var_os("PGTIER_SIM_FONT").map(PathBuf::from);
            let path = from_env
                .into_iter()
                .chain(FONT_CANDIDATES.iter().map(PathBuf::from))
                .find(|p| p.is_file())
                .ok_or(
                    "no TrueType font found (install fonts-dejavu-core or set PGTIER_SIM_FONT)",
                )?;
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // plotters keeps fonts for the life of the process; leak once, at most one font.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{}: not a usable font", path.display()))
        })
        .clone()
}

/// A fixed colour per strategy label, so every figure uses the same legend colours.
fn colour(name: &str, index: usize) -> RGBColor {
    const OTHERS: [RGBColor; 4] = [
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(140, 86, 75),
        RGBColor(23, 190, 207),
    ];
    match name {
        n if n.ends_with("PLB") => RGBColor(214, 39, 40),
        "3RR+2RR" => RGBColor(31, 119, 180),
        "4RR+1RR" => RGBColor(44, 160, 44),
        n if n.ends_with("RR") => RGBColor(90, 90, 90),
        _ => OTHERS[index % OTHERS.len()],
    }
}

/// Draws `panels` in a grid of `columns` into a PNG at `path`.
pub fn draw(path: &Path, title: &str, panels: &[Panel], columns: usize) -> Result<(), String> {
    ensure_font()?;
    let columns = columns.max(1);
    let rows = panels.len().div_ceil(columns).max(1);
    let (width, height) = (360 * columns as u32, 280 * rows as u32 + 40);
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 22))
            .map_err(|e| err(&e))?;
        let areas = root.split_evenly((rows, columns));
        for (area, panel) in areas.iter().zip(panels) {
            draw_panel(area, panel).map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    write_indexed_png(path, width, height, &rgb)
}

/// Writes an RGB buffer as a 256-colour PNG: line charts have few colours, and an indexed
/// image is several times smaller than plotters' RGB output (the docs keep them < 200 kB).
fn write_indexed_png(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<(), String> {
    let palette = palette();
    let mut cache = std::collections::HashMap::new();
    let indices: Vec<u8> = rgb
        .chunks_exact(3)
        .map(|px| {
            let key = (px[0], px[1], px[2]);
            *cache.entry(key).or_insert_with(|| nearest(&palette, key))
        })
        .collect();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    encoder.set_palette(
        palette
            .iter()
            .flat_map(|&(r, g, b)| [r, g, b])
            .collect::<Vec<u8>>(),
    );
    let mut writer = encoder.write_header().map_err(|e| err(&e))?;
    writer.write_image_data(&indices).map_err(|e| err(&e))?;
    writer.finish().map_err(|e| err(&e))
}

/// The chart colours exactly, then a 6×6×6 colour cube, then a grey ramp (256 entries).
fn palette() -> Vec<(u8, u8, u8)> {
    let mut palette: Vec<(u8, u8, u8)> = ["5PLB", "3RR+2RR", "4RR+1RR", "5RR", "", "x", "y", "z"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let c = colour(name, i);
            (c.0, c.1, c.2)
        })
        .collect();
    for r in 0..6u8 {
        for g in 0..6u8 {
            for b in 0..6u8 {
                palette.push((r * 51, g * 51, b * 51));
            }
        }
    }
    let greys = 256 - palette.len();
    for i in 0..greys {
        let v = (i * 255 / (greys - 1)) as u8;
        palette.push((v, v, v));
    }
    palette
}

fn nearest(palette: &[(u8, u8, u8)], (r, g, b): (u8, u8, u8)) -> u8 {
    let distance = |&(pr, pg, pb): &(u8, u8, u8)| {
        let d = |a: u8, b: u8| (i32::from(a) - i32::from(b)).pow(2);
        d(r, pr) + d(g, pg) + d(b, pb)
    };
    let (index, _) = palette
        .iter()
        .enumerate()
        .min_by_key(|(_, c)| distance(c))
        .unwrap_or((0, &(0, 0, 0)));
    index as u8
}

fn bounds(panel: &Panel) -> (f64, f64, f64, f64) {
    let points = panel.series.iter().flat_map(|s| s.points.iter());
    let finite: Vec<(f64, f64)> = points
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let x_min = finite.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = finite.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_min = finite.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let y_max = finite.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    if !x_min.is_finite() {
        return (0.0, 1.0, 0.0, 1.0);
    }
    let y_low = if y_min >= 0.0 { 0.0 } else { y_min * 1.1 };
    let y_high = if y_max > y_low {
        y_max * 1.1
    } else {
        y_low + 1.0
    };
    let (x_low, x_high) = if x_max > x_min {
        (x_min, x_max)
    } else {
        (x_min - 0.5, x_min + 0.5)
    };
    (x_low, x_high, y_low, y_high)
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_, plotters::backend::RGBPixel>, plotters::coord::Shift>,
    panel: &Panel,
) -> Result<(), Box<dyn std::error::Error>> {
    let (x_low, x_high, y_low, y_high) = bounds(panel);
    let categorical = !panel.x_categories.is_empty();
    let (x_low, x_high) = if categorical {
        (-0.3, panel.x_categories.len() as f64 - 0.7)
    } else {
        (x_low, x_high)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(48)
        .build_cartesian_2d(x_low..x_high, y_low..y_high)?;
    let categories = panel.x_categories.clone();
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .label_style(("sans-serif", 11))
        .light_line_style(WHITE)
        .axis_desc_style(("sans-serif", 12));
    let formatter = move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    if categorical {
        mesh.x_labels(panel.x_categories.len() * 4)
            .x_label_formatter(&formatter);
    }
    mesh.draw()?;
    for (i, series) in panel.series.iter().enumerate() {
        let c = colour(&series.name, i);
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?
            .label(series.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 11))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_small_indexed_png_when_a_font_exists() {
        if ensure_font().is_err() {
            return; // no font on this machine: plots are skipped by design
        }
        let dir = std::env::temp_dir().join(format!("pgtier-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("test.png");
        let panel = Panel {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "5PLB".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN)],
            }],
            x_categories: vec!["a".into(), "b".into(), "c".into()],
        };
        draw(&path, "test", &[panel.clone(), panel], 2).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() < 200_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn palette_has_256_entries_and_exact_strategy_colours() {
        let palette = palette();
        assert_eq!(palette.len(), 256);
        let plb = colour("5PLB", 0);
        assert_eq!(
            palette[usize::from(nearest(&palette, (plb.0, plb.1, plb.2)))],
            (plb.0, plb.1, plb.2)
        );
    }
}
