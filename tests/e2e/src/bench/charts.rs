//! Grouped horizontal bar charts as SVG, drawn with plotters' SVG backend alone. No font is read:
//! text goes into the SVG as `<text>` and the viewer's sans-serif draws it, while plotters lays it
//! out from an estimate of its width (its built-in estimate, used when no font feature is on). So
//! a chart renders the same on any machine, headless, with no system libraries.
//!
//! Horizontal bars because the categories ("Valkey 9.1.2, 3 → 4", "primary partitioned 30 s")
//! are read more easily written out than turned under a vertical bar.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One series: a bar in every category where it has a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// One per category; `None` draws no bar (a way a version does not have).
    pub values: Vec<Option<f64>>,
}

/// A reference line across every category, e.g. a goal.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// The legend's text, value and unit included ("goal: 64 MiB").
    pub name: String,
    pub value: f64,
}

/// Categories (top to bottom) × series (a bar each, in a group per category).
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    pub title: String,
    /// The value axis' description, with its unit: "seconds", "MiB".
    pub unit: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
    pub goals: Vec<Goal>,
}

/// Okabe and Ito's colours, told apart with every common colour blindness. Series take them in
/// order, so a series keeps its colour from chart to chart when the series come in one order.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0xF0, 0xE4, 0x42),
];
/// Goal lines: the palette's vermilion, kept out of the series'.
const GOAL: RGBColor = RGBColor(0xD5, 0x5E, 0x00);

const WIDTH: u32 = 900;
/// Pixels: a bar's thickness, the space between two groups, the room of the title, of the value
/// axis and of each legend line.
const BAR: u32 = 16;
const GAP: u32 = 14;
const TITLE: u32 = 40;
const AXIS: u32 = 50;
const LEGEND_LINE: u32 = 24;
/// A character's width at the 14 px font of the labels, a little more than plotters' estimate
/// (0.46 em), so that a label sized for it fits the wider letters of a real font.
const CHAR: f64 = 7.5;

fn series_colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A value as its bar's label: three significant figures (four decimals at most), no trailing
/// zeros, so 0.999 is not shown as 1 beside a goal of 1.
pub fn label(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor();
    let digits = (2.0 - magnitude).clamp(0.0, 4.0) as usize;
    let text = format!("{v:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// What the legend shows for a series (its colour's swatch) or a goal (a dashed stretch).
struct Entry {
    series: Option<usize>,
    name: String,
}

/// The legend's entries split into lines that fit the width.
fn legend_lines(bars: &Bars) -> Vec<Vec<Entry>> {
    let entries = bars
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| Entry {
            series: Some(i),
            name: s.name.clone(),
        })
        .chain(bars.goals.iter().map(|g| Entry {
            series: None,
            name: g.name.clone(),
        }));
    let mut lines: Vec<Vec<Entry>> = vec![Vec::new()];
    let mut used = 0.0;
    for entry in entries {
        let width = entry_width(&entry.name);
        if used + width > f64::from(WIDTH) - 40.0 && used > 0.0 {
            lines.push(Vec::new());
            used = 0.0;
        }
        used += width;
        if let Some(line) = lines.last_mut() {
            line.push(entry);
        }
    }
    lines
}

fn entry_width(name: &str) -> f64 {
    24.0 + CHAR * name.chars().count() as f64 + 20.0
}

/// The chart as an SVG document.
pub fn svg(bars: &Bars) -> Result<String, String> {
    let n = bars.categories.len();
    if n == 0 || bars.series.is_empty() {
        return Err(format!("{}: nothing to draw", bars.title));
    }
    if let Some(s) = bars.series.iter().find(|s| s.values.len() != n) {
        return Err(format!(
            "{}: series {} has {} values for {n} categories",
            bars.title,
            s.name,
            s.values.len()
        ));
    }
    let group = bars.series.len() as u32 * BAR + GAP;
    let legend = legend_lines(bars);
    let legend_height = legend.len() as u32 * LEGEND_LINE + 10;
    let height = TITLE + n as u32 * group + AXIS + legend_height;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        render(&root, bars, &legend, legend_height, group)?;
        root.present().map_err(|e| format!("{e}"))?;
    }
    Ok(out)
}

/// The category axis: `n` groups, each a unit long, with a label (key point) at the middle of
/// each and none between, where a plain number axis would put round numbers.
struct Groups {
    n: usize,
}

impl Ranged for Groups {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = value / self.n.max(1) as f64;
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        (0..self.n).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.n as f64
    }
}

/// What drawing on an SVG string can fail with.
type Failure = DrawingAreaErrorKind<std::io::Error>;

fn render(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    bars: &Bars,
    legend: &[Vec<Entry>],
    legend_height: u32,
    group: u32,
) -> Result<(), String> {
    let fail = |e: Failure| format!("{}: {e}", bars.title);
    root.fill(&WHITE).map_err(fail)?;
    let (plot, key) = root.split_vertically(root.dim_in_pixel().1 - legend_height);
    let n = bars.categories.len();
    let top = n as f64;
    let longest = bars
        .categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let most = bars
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .chain(bars.goals.iter().map(|g| &g.value))
        .fold(0.0_f64, |m, v| m.max(*v));
    // Room right of the longest bar for its label.
    let x_end = if most > 0.0 { most * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(&plot)
        .caption(&bars.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(AXIS - 10)
        .y_label_area_size((CHAR * longest as f64) as u32 + 20)
        .build_cartesian_2d(0.0..x_end, Groups { n })
        .map_err(fail)?;
    // Category i's group spans [n - i - 1, n - i] (the first on top); its bars fill it but for
    // half a gap above and below.
    let name_of = |y: &f64| -> String {
        let from_top = n as f64 - y.floor() - 1.0;
        if from_top < 0.0 {
            return String::new();
        }
        bars.categories
            .get(from_top as usize)
            .cloned()
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        // The bold lines at the labelled values are enough to read a bar against.
        .light_line_style(TRANSPARENT)
        .x_desc(bars.unit.as_str())
        .y_label_formatter(&name_of)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|v: &f64| label(*v))
        .draw()
        .map_err(fail)?;
    let unit = 1.0 / f64::from(group);
    let thickness = f64::from(BAR) * unit;
    let half_gap = f64::from(GAP) * unit / 2.0;
    let value_style =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (j, series) in bars.series.iter().enumerate() {
        let colour = series_colour(j);
        let placed: Vec<(f64, f64, f64)> = series
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let v = (*v)?;
                let upper = (n - i) as f64 - half_gap - j as f64 * thickness;
                Some((v, upper - thickness, upper))
            })
            .collect();
        chart
            .draw_series(placed.iter().map(|&(v, lower, upper)| {
                Rectangle::new([(0.0, lower), (v, upper)], colour.filled())
            }))
            .map_err(fail)?;
        chart
            .draw_series(placed.iter().map(|&(v, lower, upper)| {
                EmptyElement::at((v, (lower + upper) / 2.0))
                    + Text::new(label(v), (4, 0), value_style.clone())
            }))
            .map_err(fail)?;
    }
    for g in &bars.goals {
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(g.value, 0.0), (g.value, top)],
                6,
                4,
                GOAL.stroke_width(2),
            )))
            .map_err(fail)?;
    }
    draw_legend(&key, legend).map_err(fail)
}

/// The legend, under the chart: a swatch per series, a dashed stretch per goal, each with its
/// name.
fn draw_legend(
    key: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    legend: &[Vec<Entry>],
) -> Result<(), Failure> {
    let text =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (row, line) in legend.iter().enumerate() {
        let y = row as i32 * LEGEND_LINE as i32 + LEGEND_LINE as i32 / 2;
        let mut x = 20_i32;
        for entry in line {
            match entry.series {
                Some(i) => key.draw(&Rectangle::new(
                    [(x + 4, y - 6), (x + 16, y + 6)],
                    series_colour(i).filled(),
                ))?,
                None => key.draw(&DashedPathElement::new(
                    vec![(x, y), (x + 18, y)],
                    6,
                    4,
                    GOAL.stroke_width(2),
                ))?,
            }
            key.draw(&Text::new(entry.name.as_str(), (x + 24, y), text.clone()))?;
            x += entry_width(&entry.name) as i32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bars {
        Bars {
            title: "Resharding".into(),
            unit: "seconds".into(),
            categories: vec!["Valkey 9.1, 3 → 4".into(), "Valkey 8.0, 4 → 3".into()],
            series: vec![
                Series {
                    name: "operator".into(),
                    values: vec![Some(14.5), Some(57.2)],
                },
                Series {
                    name: "valkey-cli-atomic".into(),
                    values: vec![Some(16.5), None],
                },
            ],
            goals: vec![Goal {
                name: "goal: 20 s".into(),
                value: 20.0,
            }],
        }
    }

    /// `<rect` elements filled with `colour`, as plotters' SVG backend writes them.
    fn rects_of(svg: &str, colour: RGBColor) -> usize {
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", colour.0, colour.1, colour.2);
        svg.split("<rect")
            .skip(1)
            .filter(|r| {
                r.split('>')
                    .next()
                    .is_some_and(|attrs| attrs.contains(&fill))
            })
            .count()
    }

    #[test]
    fn every_category_series_value_and_goal_is_drawn_and_a_missing_value_has_no_bar() {
        let svg = svg(&sample()).expect("the chart");
        assert!(svg.starts_with("<svg"), "{svg}");
        // plotters writes each text alone on a line between its tags.
        for text in [
            "Resharding",
            "seconds",
            "Valkey 9.1, 3 → 4",
            "Valkey 8.0, 4 → 3",
            "operator",
            "valkey-cli-atomic",
            "14.5",
            "57.2",
            "16.5",
            "goal: 20 s",
        ] {
            assert!(
                svg.contains(&format!("\n{text}\n</text>")),
                "{text} missing from {svg}"
            );
        }
        // A bar per value and the legend's swatch.
        assert_eq!(rects_of(&svg, PALETTE[0]), 2 + 1);
        assert_eq!(rects_of(&svg, PALETTE[1]), 1 + 1);
        assert_eq!(rects_of(&svg, PALETTE[2]), 0);
    }

    #[test]
    fn a_series_of_the_wrong_length_or_nothing_to_draw_is_refused() {
        let mut short = sample();
        short.series[1].values.pop();
        assert!(svg(&short).is_err());
        let mut empty = sample();
        empty.categories.clear();
        empty.series.iter_mut().for_each(|s| s.values.clear());
        assert!(svg(&empty).is_err());
    }

    #[test]
    fn labels_keep_three_significant_figures_without_trailing_zeros() {
        assert_eq!(label(133.519), "134");
        assert_eq!(label(14.548), "14.5");
        assert_eq!(label(7.979), "7.98");
        assert_eq!(label(0.999206), "0.999");
        assert_eq!(label(0.000646), "0.0006");
        assert_eq!(label(1.0), "1");
        assert_eq!(label(0.0), "0");
    }
}
