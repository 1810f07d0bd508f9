//! SVG rendering of a plan: x = op index, y = offset (0 at the bottom).

use crate::plan::Plan;
use std::fmt::Write;

const W: f64 = 800.0;
const H: f64 = 500.0;
const MARGIN: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub(crate) fn render(plan: &Plan) -> String {
    let recs = plan.records();
    let t0 = recs.iter().map(|r| r.first).min().unwrap_or(0);
    let t1 = recs.iter().map(|r| r.last).max().unwrap_or(0);
    let span = (t1 - t0) as f64 + 1.0;
    let height = plan.slab_size().max(1) as f64;
    let (pw, ph) = (W - 2.0 * MARGIN, H - 2.0 * MARGIN);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        s,
        r#"<title>{}</title><text x="{}" y="20" text-anchor="middle" font-size="14">{} plan: slab {} B, lower bound {} B, ratio {:.4}</text>"#,
        esc(plan.strategy().as_str()),
        W / 2.0,
        esc(plan.strategy().as_str()),
        plan.slab_size(),
        plan.lower_bound(),
        plan.ratio()
    );
    let _ = write!(s, r##"<rect x="{MARGIN}" y="{MARGIN}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    for (i, (r, &o)) in recs.iter().zip(plan.offsets()).enumerate() {
        let x = MARGIN + (r.first - t0) as f64 / span * pw;
        let w = (r.last - r.first) as f64 + 1.0;
        let y = MARGIN + ph - (o as f64 + r.size as f64) / height * ph;
        let hue = (i * 47) % 360;
        let _ = write!(
            s,
            r##"<rect x="{x:.2}" y="{y:.2}" width="{:.2}" height="{:.2}" fill="hsl({hue},60%,70%)" stroke="#222" stroke-width="0.5"><title>{} size {} offset {} ops {}..{}</title></rect>"##,
            w / span * pw,
            r.size as f64 / height * ph,
            esc(&r.id),
            r.size,
            o,
            r.first,
            r.last
        );
    }
    let _ = write!(s, r#"<text x="{}" y="{}" text-anchor="middle">op index ({t0}..{t1})</text>"#, W / 2.0, H - 20.0);
    let _ = write!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">offset (bytes, 0..{})</text>"#,
        H / 2.0,
        H / 2.0,
        plan.slab_size()
    );
    s.push_str("</svg>");
    s
}
