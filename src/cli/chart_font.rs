//! The one font the CLI's charts (`bench --plot`, `mismatch --plot`) draw text with:
//! unmodified DejaVu Sans Mono, embedded in the binary (assets/fonts, with its licence,
//! which allows bundling it with software). plotters lays text out with the font
//! registered for a family even in SVG, so a system font would make a chart depend on the
//! machine, and fail where there is none; the embedded one draws the same everywhere.

use std::sync::OnceLock;

use anyhow::{Result, bail};
use plotters::style::FontStyle;

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSansMono.ttf");

/// The family a chart's text names (plotters' `FontFamily::Monospace`).
pub const FAMILY: &str = "monospace";

/// Makes the embedded font [`FAMILY`] (once per process).
pub fn register() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if !registered {
        bail!("the embedded chart font could not be read");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_font_parses() {
        super::register().unwrap();
    }
}
