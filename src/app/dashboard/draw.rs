//! Drawing: a pure function of [`App`] onto a ratatui frame, so it can be tested with
//! ratatui's `TestBackend`. Panels, top to bottom: header (state, elapsed, backend, bytes),
//! overall progress, the stage table, queues and slot ring gauges beside the throughput
//! sparkline, the GPU (or CPU backend) panel beside the last errors, and the key line with
//! the log file. Below 24 rows or 80 columns panels are dropped or narrowed, most useful
//! last.

use std::path::Path;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, LineGauge, Paragraph, Row, Sparkline, Table, Wrap};
use ratatui::Frame;

use super::app::{clock, eta, ms, rate, App, RunState};

const ACCENT: Color = Color::Cyan;
const HOT: Color = Color::LightRed;

fn mb(bytes: u64) -> String {
    if bytes >= 10_000_000_000 {
        format!("{:.1} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// The last two components of a path (enough to recognise a file in a series).
fn short_path(p: &Path) -> String {
    let parts: Vec<_> = p.components().rev().take(2).collect();
    let mut s = String::new();
    for (i, c) in parts.iter().rev().enumerate() {
        if i > 0 {
            s.push('/');
        }
        s.push_str(&dicomflow::paths::escape(Path::new(c.as_os_str())));
    }
    s
}

/// Draws the whole dashboard.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    let compact = area.width < 80;
    let stages_h = 2 + 1 + app.stage_rows().len() as u16;
    let queues_h = 2 + (app.snap.gauges.len().clamp(1, 6) as u16);
    // What fits: the stage table always; the queue row and the bottom row when there is room.
    let fixed = 1 + 1 + stages_h + 1;
    let show_bottom = area.height >= fixed + 4;
    let show_queues = area.height >= fixed + queues_h + 4;
    let mut constraints = vec![
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(stages_h),
    ];
    if show_queues {
        constraints.push(Constraint::Length(queues_h));
    }
    if show_bottom {
        constraints.push(Constraint::Min(4));
    }
    constraints.push(Constraint::Length(1));
    let rows = Layout::vertical(constraints).split(area);
    let mut next = 0;
    let mut take = || {
        let r = rows[next];
        next += 1;
        r
    };
    header(f, app, take());
    progress(f, app, take());
    stages(f, app, take(), compact);
    if show_queues {
        let [q, s] = Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
            .areas(take());
        queues(f, app, q);
        sparkline(f, app, s);
    }
    if show_bottom {
        match &app.live {
            Some(live) => {
                let [g, i, e] = Layout::horizontal([
                    Constraint::Percentage(28),
                    Constraint::Percentage(37),
                    Constraint::Percentage(35),
                ])
                .areas(take());
                backend(f, app, g);
                ingest(f, live, i);
                errors(f, app, e);
            }
            None => {
                let [g, e] =
                    Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)])
                        .areas(take());
                backend(f, app, g);
                errors(f, app, e);
            }
        }
    }
    footer(f, app, take());
    if app.help {
        help(f, area);
    }
}

fn header(f: &mut Frame, app: &App, area: Rect) {
    let s = &app.snap;
    let state = app.state();
    let label = match (&app.live, state) {
        (Some(_), RunState::Running) => "LIVE",
        (Some(_), RunState::Finishing) => "STOPPING: finishing what arrived",
        _ => state.label(),
    };
    let state_style = match state {
        RunState::Running => Style::new().fg(Color::Green),
        RunState::Paused => Style::new().fg(Color::Yellow),
        RunState::Finishing => Style::new().fg(HOT),
        RunState::Done => Style::new().fg(ACCENT),
    }
    .add_modifier(Modifier::BOLD);
    let line = Line::from(vec![
        Span::styled(
            format!(" dicomflow {} ", env!("CARGO_PKG_VERSION")),
            Style::new().fg(Color::Black).bg(ACCENT),
        ),
        Span::raw(" "),
        Span::styled(label, state_style),
        Span::raw(format!(
            "  {}  {}  in {} out {}",
            clock(s.elapsed),
            if s.backend.is_empty() {
                "starting"
            } else {
                &s.backend
            },
            mb(s.bytes_in),
            mb(s.bytes_out)
        )),
    ]);
    f.render_widget(Paragraph::new(line), area);
}

fn progress(f: &mut Frame, app: &App, area: Rect) {
    if let Some(live) = &app.live {
        // No end, so no ratio and no ETA: what arrives, how fast, how soon it is written.
        let line = Line::from(Span::styled(
            format!(" {}", live.line(app.snap.error_count)),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    let p = app.progress();
    let label = format!(
        "frames {}  {} fr/s  ETA {}  errors {}",
        p.done_of_total(),
        rate(p.per_s),
        p.eta.map(eta).unwrap_or_else(|| "-".into()),
        p.errors
    );
    let gauge = LineGauge::default()
        .ratio(p.ratio().clamp(0.0, 1.0))
        .label(Span::styled(
            format!(" {label}"),
            Style::new().add_modifier(Modifier::BOLD),
        ))
        .filled_symbol("█")
        .unfilled_symbol("░")
        .filled_style(Style::new().fg(Color::Blue))
        .unfilled_style(Style::new().fg(Color::DarkGray));
    f.render_widget(gauge, area);
}

fn stages(f: &mut Frame, app: &App, area: Rect, compact: bool) {
    let rows = app.stage_rows();
    let bottleneck = rows.iter().find(|r| r.bottleneck).map(|r| r.name);
    let mut header = vec!["stage", "slices", "slices/s", "p50 ms", "p95 ms"];
    if !compact {
        header.extend(["p99 ms", "max ms"]);
    }
    header.push("busy");
    let wide = area.width >= 96;
    let num = |x: String| Cell::from(Line::from(x).right_aligned());
    let body = rows.iter().map(|r| {
        let dash = || Cell::from(Line::from("-").right_aligned());
        let mut cells: Vec<Cell> = vec![Cell::from(if r.bottleneck {
            format!("▶{}", r.name)
        } else {
            format!(" {}", r.name)
        })];
        if r.present {
            cells.push(num(r.count.to_string()));
            cells.push(num(rate(r.per_s)));
            cells.push(num(ms(r.p50_ms)));
            cells.push(num(ms(r.p95_ms)));
            if !compact {
                cells.push(num(ms(r.p99_ms)));
                cells.push(num(ms(r.max_ms)));
            }
            let pct = format!("{:>3.0}%", r.busy * 100.0);
            cells.push(Cell::from(if wide {
                let n = (r.busy * 10.0).round() as usize;
                format!("{pct} {}{}", "█".repeat(n), "·".repeat(10 - n.min(10)))
            } else {
                pct
            }));
        } else {
            for _ in 2..header.len() {
                cells.push(dash());
            }
            cells.push(Cell::from("   -"));
        }
        let style = if r.bottleneck {
            Style::new().fg(HOT).add_modifier(Modifier::BOLD)
        } else if !r.present {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        };
        Row::new(cells).style(style)
    });
    let mut widths = vec![
        Constraint::Length(13),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
    ];
    if !compact {
        widths.extend([Constraint::Length(7), Constraint::Length(8)]);
    }
    widths.push(Constraint::Min(4));
    let title = match bottleneck {
        Some(b) => Line::from(vec![
            Span::raw(" Stages ─ bottleneck: "),
            Span::styled(b, Style::new().fg(HOT).add_modifier(Modifier::BOLD)),
            Span::raw(" "),
        ]),
        None => Line::from(" Stages "),
    };
    let table = Table::new(body, widths)
        .header(
            Row::new(header.into_iter().enumerate().map(|(i, h)| {
                if i == 0 {
                    Cell::from(format!(" {h}"))
                } else if h == "busy" {
                    Cell::from(format!("{h:>4}"))
                } else {
                    num(h.to_string())
                }
            }))
            .style(Style::new().fg(ACCENT).add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(title))
        .column_spacing(1);
    f.render_widget(table, area);
}

fn queues(f: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(" Queues & slot ring ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let gauges = &app.snap.gauges;
    if gauges.is_empty() {
        f.render_widget(Paragraph::new("(starting)"), inner);
        return;
    }
    let name_w = gauges
        .iter()
        .map(|g| g.name.chars().count())
        .max()
        .unwrap_or(0);
    for (i, g) in gauges.iter().take(inner.height as usize).enumerate() {
        let ratio = if g.capacity == 0 {
            0.0
        } else {
            (g.current as f64 / g.capacity as f64).clamp(0.0, 1.0)
        };
        let color = if ratio > 0.9 {
            HOT
        } else if ratio > 0.5 {
            Color::Yellow
        } else {
            Color::Green
        };
        let label = format!(
            "{:<name_w$} {:>4}/{:<4}",
            g.name,
            g.current,
            g.capacity,
            name_w = name_w
        );
        let row = Rect {
            y: inner.y + i as u16,
            height: 1,
            ..inner
        };
        f.render_widget(
            LineGauge::default()
                .ratio(ratio)
                .label(label)
                .filled_symbol("█")
                .unfilled_symbol("·")
                .filled_style(Style::new().fg(color))
                .unfilled_style(Style::new().fg(Color::DarkGray)),
            row,
        );
    }
}

fn sparkline(f: &mut Frame, app: &App, area: Rect) {
    let points = app.spark();
    let width = area.width.saturating_sub(2) as usize;
    let skip = points.len().saturating_sub(width);
    let data: Vec<u64> = points.iter().skip(skip).copied().collect();
    let peak = data.iter().copied().max().unwrap_or(0);
    let now = data.last().copied().unwrap_or(0);
    let title = format!(" Throughput fr/s  now {now}  peak {peak} ");
    f.render_widget(
        Sparkline::default()
            .block(Block::bordered().title(title))
            .data(data)
            .style(Style::new().fg(ACCENT)),
        area,
    );
}

fn backend(f: &mut Frame, app: &App, area: Rect) {
    let s = &app.snap;
    let mut lines = Vec::new();
    let title;
    match &s.gpu {
        Some(g) => {
            title = " GPU ";
            for (i, d) in g.devices.iter().enumerate() {
                let frames = g.frames_per_device.get(i).copied().unwrap_or(0);
                lines.push(Line::from(format!("{i}: {d}  {frames} fr")));
            }
            lines.push(Line::from(format!("transfer: {}", g.strategy)));
            if !g.encoder.is_empty() {
                lines.push(Line::from(format!("encoder: {}", g.encoder)));
            }
            for (i, p) in g.pools.iter().enumerate() {
                lines.push(Line::from(format!(
                    "pool {i}: {:.0}/{:.0} MB used/rsv",
                    p[1] as f64 / 1e6,
                    p[0] as f64 / 1e6
                )));
            }
            if g.pinned_bytes > 0 {
                lines.push(Line::from(format!("pinned host: {}", mb(g.pinned_bytes))));
            }
            if g.frames_gpu_decoded + g.frames_decode_fallback > 0 {
                lines.push(Line::from(format!(
                    "decode: {} GPU, {} CPU fallback",
                    g.frames_gpu_decoded, g.frames_decode_fallback
                )));
            }
            if g.frames_uploaded > 0 {
                lines.push(Line::from(format!(
                    "upload: {} frames by the loaders",
                    g.frames_uploaded
                )));
            }
            if !g.codecs.is_empty() {
                lines.push(Line::from(format!("codecs: {}", g.codecs)));
            }
            if s.gpu_encoded_frames > 0 {
                lines.push(Line::from(format!(
                    "GPU encoded: {} fr, {:.0} KB/fr",
                    s.gpu_encoded_frames,
                    s.gpu_encoded_bytes as f64 / 1e3 / s.gpu_encoded_frames as f64
                )));
            }
        }
        None => {
            title = " Backend ";
            lines.push(Line::from(Span::styled(
                "CPU backend",
                Style::new().add_modifier(Modifier::BOLD),
            )));
            if !s.backend.is_empty() && s.backend != "cpu" {
                lines.push(Line::from(s.backend.clone()));
            }
        }
    }
    if let Some([h2d, k, enc, d2h]) = app.gpu_split() {
        if s.gpu.is_some() && enc > 0.0 {
            lines.push(Line::from(format!(
                "H2D {h2d:.0}% | kernel {k:.0}% | enc {enc:.0}% | D2H {d2h:.0}%"
            )));
        } else if s.gpu.is_some() {
            lines.push(Line::from(format!(
                "H2D {h2d:.0}% | kernel {k:.0}% | D2H {d2h:.0}%"
            )));
        }
    }
    let workers = s
        .stage(dicomflow::observe::stats::StageId::Compute)
        .map(|c| c.workers)
        .unwrap_or(0);
    if workers > 0 && s.gpu.is_none() {
        let plural = if workers == 1 { "" } else { "s" };
        lines.push(Line::from(if s.render_on_writers && s.shared_threads {
            format!("{workers} shared thread{plural}, load to write")
        } else if s.render_on_writers {
            format!("rendering on {workers} writer thread{plural}")
        } else {
            format!("render workers: {workers}")
        }));
    }
    f.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(title))
            .wrap(Wrap { trim: true }),
        area,
    );
}

/// The live run's panel: associations, arrivals, latency, outcomes, and the senders.
fn ingest(f: &mut Frame, live: &super::app::Live, area: Rect) {
    let s = &live.snap;
    let mut lines = vec![
        Line::from(format!(
            "assoc {} open, {} total, {} refused",
            s.associations_open, s.associations_total, s.associations_refused
        )),
        Line::from(format!(
            "arrivals {} ({}/s) waiting {}",
            s.arrivals,
            rate(live.arrivals_per_s()),
            s.pending
        )),
        Line::from(match s.latency_ms {
            Some([p50, p95, p99, _]) => {
                format!("latency {}/{}/{} ms", ms(p50), ms(p95), ms(p99))
            }
            None => "latency -".into(),
        }),
        Line::from(format!(
            "rendered {} skipped {} failed {}",
            s.rendered, s.skipped, s.failed
        )),
        Line::from(format!("instances refused {}", s.refused)),
    ];
    let room = area.height.saturating_sub(2 + lines.len() as u16) as usize;
    let mut senders: Vec<_> = s.senders.iter().collect();
    senders.sort_by_key(|(_, c)| std::cmp::Reverse(c.received));
    for (name, c) in senders.into_iter().take(room) {
        lines.push(Line::from(vec![
            Span::styled(name.clone(), Style::new().fg(Color::Yellow)),
            Span::raw(format!("  {} ({})", c.received, mb(c.bytes))),
            if c.refused > 0 {
                Span::styled(format!("  refused {}", c.refused), Style::new().fg(HOT))
            } else {
                Span::raw("")
            },
        ]));
    }
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Ingest (latency p50/95/99) ")),
        area,
    );
}

fn errors(f: &mut Frame, app: &App, area: Rect) {
    let s = &app.snap;
    let title = Line::from(vec![
        Span::raw(" Errors "),
        Span::styled(
            format!("({})", s.error_count),
            if s.error_count > 0 {
                Style::new().fg(HOT).add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            },
        ),
        Span::raw(" "),
    ]);
    let rows = area.height.saturating_sub(2) as usize;
    let width = area.width.saturating_sub(2).max(1) as usize;
    let shown: Vec<(String, String)> = s
        .recent_errors
        .iter()
        .rev()
        .take(rows)
        .map(|e| (short_path(&e.path), format!(": {}: {}", e.stage, e.reason)))
        .collect();
    // Whole reasons (wrapped) when they fit; otherwise one line per error, newest first.
    let wrapped_height: usize = shown
        .iter()
        .map(|(p, r)| (p.chars().count() + r.chars().count()).div_ceil(width))
        .sum();
    let lines: Vec<Line> = if shown.is_empty() {
        vec![Line::from(Span::styled(
            "none",
            Style::new().fg(Color::DarkGray),
        ))]
    } else {
        shown
            .into_iter()
            .map(|(p, r)| {
                Line::from(vec![
                    Span::styled(p, Style::new().fg(Color::Yellow)),
                    Span::raw(r),
                ])
            })
            .collect()
    };
    let mut para = Paragraph::new(lines).block(Block::bordered().title(title));
    if wrapped_height <= rows {
        para = para.wrap(Wrap { trim: false });
    }
    f.render_widget(para, area);
}

fn footer(f: &mut Frame, app: &App, area: Rect) {
    let key = |k: &'static str| Span::styled(k, Style::new().fg(Color::Black).bg(ACCENT));
    let mut spans = vec![
        key(" q "),
        Span::raw(" finish & quit "),
        key(" p "),
        Span::raw(if app.snap.paused {
            " resume "
        } else {
            " pause loading "
        }),
        key(" ? "),
        Span::raw(" help "),
    ];
    if let Some(p) = &app.log_path {
        spans.push(Span::styled(
            format!(" log: {}", p.display()),
            Style::new().fg(Color::DarkGray),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn help(f: &mut Frame, area: Rect) {
    let w = 58.min(area.width);
    let h = 11.min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines = vec![
        Line::from("q, Ctrl-C  finish in-flight slices, then quit with"),
        Line::from("           the summary (nothing partial is written)"),
        Line::from("Ctrl-C ×2  quit at once"),
        Line::from("p          pause / resume loading new files"),
        Line::from("?          show / hide this help"),
        Line::from(""),
        Line::from("▶ marks the bottleneck: the busiest stage recently."),
        Line::from("busy = time in the stage / (time × its threads)."),
    ];
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Help (? closes) ")),
        popup,
    );
}
