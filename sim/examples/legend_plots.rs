//! Both plots of `sim table`, with its eight policies and made-up hit rates, written as SVG and
//! PNG to a folder (the first argument, else the system's temporary folder): for looking at a
//! legend's layout without running the evaluation.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let out = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let policies: Vec<String> = agentrt_sim::harness::DEFAULT_POLICY_NAMES.map(String::from).into();
    let workloads: Vec<String> = ["swe-agent", "map-reduce", "fleet"].map(String::from).into();
    let rate = |w: usize, p: usize| 0.2 + 0.07 * p as f64 + 0.05 * w as f64;
    let bars: Vec<Vec<f64>> = (0..workloads.len())
        .map(|w| (0..policies.len()).map(|p| rate(w, p)).collect())
        .collect();
    let caps = vec![vec![256, 1024, 4096]; workloads.len()];
    let series: Vec<Vec<Vec<f64>>> = (0..workloads.len())
        .map(|w| {
            (0..policies.len())
                .map(|p| [0.5, 0.8, 1.0].iter().map(|s| s * rate(w, p)).collect())
                .collect()
        })
        .collect();
    let plots = [
        (
            "legend-hit-rate",
            agentrt_sim::plot::hit_rate_bars(
                "Token hit rate at the headline cache (4096 blocks)",
                &workloads,
                &policies,
                &bars,
            ),
        ),
        (
            "legend-capacity",
            agentrt_sim::plot::capacity_lines(
                "Token hit rate against cache capacity",
                &workloads,
                &policies,
                &caps,
                &series,
            ),
        ),
        (
            "legend-one-panel",
            agentrt_sim::plot::capacity_lines(
                "Token hit rate against cache capacity",
                &workloads[..1],
                &policies,
                &caps,
                &series,
            ),
        ),
    ];
    for (stem, svg) in &plots {
        let path = out.join(format!("{stem}.png"));
        std::fs::write(out.join(format!("{stem}.svg")), svg)?;
        agentrt_sim::png::write_png(svg, &path)?;
        println!("{}", path.display());
    }
    Ok(())
}
