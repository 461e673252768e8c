//! `--plot`: the loss curve(s) as a PNG with plotters' bitmap backend.
//!
//! Text needs a font. Rather than linking fontconfig / freetype (absent on a fresh CI
//! machine), the font is loaded at run time from a few usual places; without one the
//! plot is drawn without text.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

/// Font files tried in order for labels.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Registers the first font found as "sans-serif"; true on success.
fn register_font() -> bool {
    FONT_PATHS.iter().any(|path| {
        std::fs::read(path).is_ok_and(|bytes| {
            // plotters keeps fonts for the life of the process; leaking one file is fine.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// Draws `this` (the whole history of this run) and, if given, `reference` under it,
/// with a vertical line after `resumed_after` when this run was resumed there.
pub fn draw(
    path: &Path,
    this: &[(u64, f32)],
    reference: Option<(&str, &BTreeMap<u64, f32>)>,
    resumed_after: Option<u64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let text = register_font();
    let all = this.iter().copied().chain(
        reference
            .iter()
            .flat_map(|(_, r)| r.iter().map(|(&s, &l)| (s, l))),
    );
    let (mut max_step, mut lo, mut hi) = (1u64, f32::INFINITY, f32::NEG_INFINITY);
    for (step, loss) in all.filter(|(_, l)| l.is_finite()) {
        max_step = max_step.max(step);
        lo = lo.min(loss);
        hi = hi.max(loss);
    }
    if lo > hi {
        (lo, hi) = (0.0, 1.0);
    }
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption("training loss", ("sans-serif", 24))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d(0u64..max_step + 1, lo * 0.95..hi * 1.05)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("step").y_desc("loss");
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    if let Some(step) = resumed_after {
        let (y0, y1) = (lo * 0.95, hi * 1.05);
        let line = chart.draw_series(LineSeries::new([(step, y0), (step, y1)], BLACK.mix(0.5)))?;
        if text {
            line.label(format!("resumed after step {step}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
        }
    }
    if let Some((name, reference)) = reference {
        let series = chart.draw_series(LineSeries::new(
            reference.iter().map(|(&s, &l)| (s, l)),
            BLUE.stroke_width(4),
        ))?;
        if text {
            series
                .label(name.to_string())
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(4)));
        }
    }
    let series = chart.draw_series(LineSeries::new(this.iter().copied(), RED.stroke_width(1)))?;
    if text {
        series
            .label("this run")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
