//! PNG copies of the SVG plots, for viewers that do not render SVG (issue trackers, slides).
//!
//! The SVG stays the source: it is rasterised here with resvg at 2× for sharp text. Text needs a
//! font; the system's are loaded, and when the generic family the SVG names is missing, the
//! first sans-serif face found stands in (DejaVu Sans on Debian). With no fonts at all the PNG is
//! still written, without its labels, and a warning says so.

use std::path::Path;

use anyhow::Context;
use resvg::{tiny_skia, usvg};

/// Pixels per SVG unit: 2× keeps labels legible when the image is scaled down.
const SCALE: f32 = 2.0;

/// Rasterise `svg` and write it to `path` as PNG.
pub fn write_png(svg: &str, path: &Path) -> anyhow::Result<()> {
    let options = options_with_fonts(path);
    let tree = usvg::Tree::from_str(svg, &options).context("parsing the plot's SVG")?;
    let size = tree.size().to_int_size().scale_by(SCALE).context("plot size")?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).context("allocating the image")?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(SCALE, SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap
        .save_png(path)
        .with_context(|| format!("writing {}", path.display()))
}

/// Parsing options with the system's fonts and a sans-serif stand-in; `path` only names the
/// image in the warning when there are no fonts.
fn options_with_fonts(path: &Path) -> usvg::Options<'static> {
    let mut options = usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    if fonts.is_empty() {
        tracing::warn!(path = %path.display(), "no system fonts: the PNG has no text");
    }
    let fallback = fonts
        .faces()
        .flat_map(|face| face.families.iter().map(|(name, _)| name.clone()))
        .find(|name| name.contains("Sans") && !name.contains("Mono"));
    if let Some(name) = fallback {
        fonts.set_sans_serif_family(name);
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_becomes_a_png_of_twice_its_size() {
        let svg = crate::plot::hit_rate_bars("t", &["mmlu".into()], &["lru".into()], &[vec![0.5]]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        write_png(&svg, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let svg_width: f32 = svg
            .split("width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(width, (svg_width * SCALE) as u32);
    }

    /// The rendered width of `text` in `family` (the text's own box: advances, not ink).
    fn rendered_width(options: &usvg::Options, family: &str, bold: bool, size: f64, text: &str) -> f64 {
        let weight = if bold { "bold" } else { "normal" };
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4000\" height=\"40\">\
             <text x=\"0\" y=\"30\" font-family=\"{family}\" font-weight=\"{weight}\" font-size=\"{size}\">{}</text></svg>",
            text.replace('&', "&amp;").replace('<', "&lt;")
        );
        let tree = usvg::Tree::from_str(&svg, options).unwrap();
        let width = tree
            .root()
            .children()
            .iter()
            .map(|node| match node {
                usvg::Node::Text(t) => t.bounding_box().width() as f64,
                _ => 0.0,
            })
            .sum();
        width
    }

    #[test]
    fn the_plots_width_estimate_bounds_the_rendered_text() {
        let options = options_with_fonts(Path::new("test"));
        let mut families: Vec<String> = options
            .fontdb
            .faces()
            .flat_map(|face| face.families.iter().map(|(name, _)| name.clone()))
            .filter(|name| name.contains("Sans") && !name.contains("Mono"))
            .collect();
        families.sort();
        families.dedup();
        assert!(
            !families.is_empty(),
            "no sans-serif font installed (Debian: fonts-dejavu-core): the estimate cannot be checked"
        );
        let samples = [
            "lru",
            "session-retain",
            "cachesage-evict",
            "belady",
            "Bélády-oracle",
            "WWMM mixture-of-experts",
            "abcdefghijklmnopqrstuvwxyz",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
            "0123456789 .,:;-()[]/%@…",
            "fleet: token hit rate against applications sharing the engine (4096 blocks)",
        ];
        for family in &families {
            for bold in [false, true] {
                for (size, text) in samples.iter().flat_map(|t| [(12.0, *t), (15.0, *t)]) {
                    let rendered = rendered_width(&options, family, bold, size, text);
                    assert!(rendered > 0.0, "{family}: {text:?} was not laid out");
                    let estimate = crate::plot::text::width(text, size);
                    assert!(
                        rendered <= estimate,
                        "{family} (bold {bold}) at {size}: {text:?} is {rendered:.1} wide, estimated {estimate:.1}"
                    );
                }
            }
        }
    }

    #[test]
    fn broken_svg_is_an_error_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        assert!(write_png("<svg", &path).is_err());
        assert!(!path.exists());
    }
}
