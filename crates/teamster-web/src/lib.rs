//! The charts the live dashboard (served by the daemon) and `report.html` (written by the
//! simulator) share: one plain script drawing on canvases and one style sheet, with no library
//! and no network. A crate of its own so that the daemon serves them without depending on the
//! simulator.
#![forbid(unsafe_code)]

/// The chart code, for pages that show Teamster's charts.
pub const CHARTS_JS: &str = include_str!("charts.js");

/// The style those pages share.
pub const CHARTS_CSS: &str = include_str!("charts.css");

/// `template` with the shared style and chart code put in place of `/*STYLE*/` and `/*CHARTS*/`.
pub fn with_charts(template: &str) -> String {
    template
        .replace("/*STYLE*/", CHARTS_CSS)
        .replace("/*CHARTS*/", CHARTS_JS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_placeholders_are_filled() {
        let page = super::with_charts("<style>/*STYLE*/</style><script>/*CHARTS*/</script>");
        assert!(!page.contains("/*STYLE*/") && !page.contains("/*CHARTS*/"));
        assert!(page.len() > super::CHARTS_JS.len() + super::CHARTS_CSS.len());
    }
}
