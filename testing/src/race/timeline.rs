//! `tairlock race --timeline FILE`: one trial per algorithm and scenario, drawn as an SVG.
//!
//! Plain data in, an SVG string out: a [`Recorder`] collects what happened in one trial (the
//! trial feeds it, only when a timeline was asked for), [`Recorder::finish`] turns it into a
//! [`Timeline`], and [`svg`] draws timelines side by side, each verbatim recipe next to its fix
//! ([`PAIRS`]). Nothing here knows the rest of the race.
//!
//! In each panel, one row per client on a shared time axis:
//!
//! - a bar per critical section, from the grant (the acquire returned) to leaving it, labelled
//!   with its fencing token where the bar is wide enough; a thin line after it while the
//!   release is on its way; readers' (shared) sections in a lighter colour;
//! - stalls and crashes as hatched gaps (the crash's gap lasts until the client restarts), and
//!   reply outages (the client's acquire replies dropped) as dotted ones;
//! - a tick where the holder's lease ends, as its acquire computed it;
//! - overlaps, foreign deletions, accepted stale writes and late deadlines as red markers of
//!   distinct shapes (diamond, cross, disc, triangle) where they happen, each an element of
//!   class `violation`;
//! - a caption with the trial's counts: the same counts as the trial's JSON row.
//!
//! The SVG is self-contained: no scripts, no external fonts, images or style sheets.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Each verbatim recipe and the algorithm that fixes it, drawn side by side (recipe left).
pub const PAIRS: [(&str, &str); 3] = [
    ("naive-setnx-expire", "expire-lock"),
    ("legacy-getset", "legacy-scripted"),
    ("rw-two-step", "rw-scripted"),
];

/// What went wrong, at one moment, on one client's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// The client entered the critical section while another client was inside it (for
    /// reader/writer locks: a writer together with anyone).
    Overlap,
    /// The client deleted or overwrote a lock value another live holder wrote.
    ForeignDeletion,
    /// The resource accepted the client's write although a later grant had already written.
    StaleWrite,
    /// The client accepted a grant whose local deadline is later than the lease's end on the
    /// server: it would go on trusting a lease the server may have let go.
    LateDeadline,
}

impl ViolationKind {
    /// Every kind, in legend order.
    pub const ALL: [ViolationKind; 4] = [
        ViolationKind::Overlap,
        ViolationKind::ForeignDeletion,
        ViolationKind::StaleWrite,
        ViolationKind::LateDeadline,
    ];

    /// The SVG class next to `violation`, and the JSON field's stem.
    pub fn class(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::ForeignDeletion => "foreign-deletion",
            ViolationKind::StaleWrite => "stale-write",
            ViolationKind::LateDeadline => "late-deadline",
        }
    }

    fn label(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlaps",
            ViolationKind::ForeignDeletion => "foreign deletions",
            ViolationKind::StaleWrite => "stale writes accepted",
            ViolationKind::LateDeadline => "late deadlines",
        }
    }
}

/// One critical section of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The client.
    pub client: usize,
    /// The grant: the client's acquire returned and it entered.
    pub start: Duration,
    /// It left the critical section (or crashed inside it).
    pub end: Duration,
    /// Its release returned (or it crashed releasing); `None` if it never released.
    pub released: Option<Duration>,
    /// The fencing token, for algorithms that issue one.
    pub fence: Option<u64>,
    /// A reader's section of a reader/writer lock.
    pub shared: bool,
    /// The client crashed inside the section or while releasing.
    pub crashed: bool,
}

/// Why a client was absent for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapKind {
    /// The scenario paused it.
    Stall,
    /// It crashed; the gap ends when it restarts, knowing nothing.
    Crash,
    /// The replies to its acquires were dropped (it keeps repeating them).
    Outage,
}

/// A stall or a crash of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The client.
    pub client: usize,
    /// Stall or crash.
    pub kind: GapKind,
    /// When it began.
    pub start: Duration,
    /// When it ended.
    pub end: Duration,
}

/// A violation, where and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The client whose step it was: the one entering, deleting, or writing.
    pub client: usize,
    /// When.
    pub at: Duration,
    /// What.
    pub kind: ViolationKind,
}

/// The trial's counts, as in its JSON row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caption {
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that found another client inside the critical section.
    pub overlaps: u64,
    /// Deletions of another live holder's lock.
    pub foreign_deletions: u64,
    /// Writes accepted although a later grant had already written.
    pub stale_writes_accepted: u64,
    /// Writes the fenced resource rejected.
    pub writes_rejected: u64,
    /// A lock key that never expires at the trial's end (0 or 1 per key).
    pub stuck_locks: u64,
    /// Grants whose local deadline was later than the lease's end on the server.
    pub late_deadlines: u64,
    /// Stalls injected.
    pub stalls: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// The row's verdict: `ok`, `flaws shown`, `no flaw shown` or `BROKEN`.
    pub verdict: String,
}

impl Caption {
    /// The count of one kind of violation.
    pub fn count(&self, kind: ViolationKind) -> u64 {
        match kind {
            ViolationKind::Overlap => self.overlaps,
            ViolationKind::ForeignDeletion => self.foreign_deletions,
            ViolationKind::StaleWrite => self.stale_writes_accepted,
            ViolationKind::LateDeadline => self.late_deadlines,
        }
    }
}

/// One trial, ready to draw. Times are since the race's time zero; the axis runs from `start`
/// to `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// Algorithm name.
    pub algorithm: String,
    /// Scenario name.
    pub scenario: String,
    /// `safe`, `unfenced` or `flawed`.
    pub expectation: String,
    /// Clients in the trial (one row each).
    pub clients: usize,
    /// The trial's start.
    pub start: Duration,
    /// The trial's end: its length, or later when the last round finished later.
    pub end: Duration,
    /// Critical sections.
    pub sections: Vec<Section>,
    /// Stalls and crashes.
    pub gaps: Vec<Gap>,
    /// Lease ends, by client, as each holder's acquire computed them.
    pub expiries: Vec<(usize, Duration)>,
    /// Overlaps, foreign deletions and accepted stale writes.
    pub violations: Vec<Violation>,
    /// The counts.
    pub caption: Caption,
}

/// What one trial did, collected as it happens; see the [module docs](self).
#[derive(Debug, Default)]
pub struct Recorder {
    sections: Vec<Section>,
    /// The index of each client's section in `sections` whose end is not known yet.
    open: HashMap<usize, usize>,
    /// The client of each grant (for stale writes, which the resource knows by grant).
    grants: HashMap<u64, usize>,
    gaps: Vec<Gap>,
    /// The index of each crashed client's gap in `gaps`, until it restarts.
    down: HashMap<usize, usize>,
    expiries: Vec<(usize, Duration)>,
    violations: Vec<Violation>,
    /// A value a client wrote in its current attempt that another client deleted before the
    /// attempt returned: by (writer, value), the deleter and when.
    deleted_early: HashMap<(usize, Vec<u8>), (usize, Duration)>,
    last: Duration,
}

impl Recorder {
    /// A recorder with nothing recorded yet.
    pub fn new() -> Self {
        Recorder::default()
    }

    fn saw(&mut self, at: Duration) {
        self.last = self.last.max(at);
    }

    /// `client` entered the critical section with grant number `grant`.
    pub fn enter(&mut self, client: usize, grant: u64, at: Duration, shared: bool) {
        self.saw(at);
        self.open.insert(client, self.sections.len());
        self.grants.insert(grant, client);
        self.sections.push(Section {
            client,
            start: at,
            end: at,
            released: None,
            fence: None,
            shared,
            crashed: false,
        });
    }

    /// The holding of `client`'s open section: its fencing token and when its lease ends.
    pub fn holding(&mut self, client: usize, fence: Option<u64>, lease_ends: Duration) {
        if let Some(&i) = self.open.get(&client) {
            self.sections[i].fence = fence;
            self.expiries.push((client, lease_ends));
        }
    }

    /// `client` left the critical section.
    pub fn leave(&mut self, client: usize, at: Duration) {
        self.saw(at);
        if let Some(i) = self.open.remove(&client) {
            self.sections[i].end = at;
        }
    }

    /// `client`'s release returned.
    pub fn released(&mut self, client: usize, at: Duration) {
        self.saw(at);
        if let Some(s) = self.last_section(client) {
            s.released = Some(at);
        }
    }

    fn last_section(&mut self, client: usize) -> Option<&mut Section> {
        self.sections
            .iter_mut()
            .rev()
            .find(|s| s.client == client)
            .filter(|s| s.released.is_none() && !s.crashed)
    }

    /// The scenario paused `client` for `d`.
    pub fn stall(&mut self, client: usize, at: Duration, d: Duration) {
        self.saw(at + d);
        self.gaps.push(Gap {
            client,
            kind: GapKind::Stall,
            start: at,
            end: at + d,
        });
    }

    /// The replies to `client`'s acquires are dropped for `d` from `at`.
    pub fn outage(&mut self, client: usize, at: Duration, d: Duration) {
        self.saw(at);
        self.gaps.push(Gap {
            client,
            kind: GapKind::Outage,
            start: at,
            end: at + d,
        });
    }

    /// A reply to `client` was dropped at `at` (the axis reaches it).
    pub fn reply_dropped(&mut self, _client: usize, at: Duration) {
        self.saw(at);
    }

    /// `client` crashed: a section it was in or releasing ends here.
    pub fn crash(&mut self, client: usize, at: Duration) {
        self.saw(at);
        if let Some(i) = self.open.remove(&client) {
            self.sections[i].end = at;
        }
        if let Some(s) = self.last_section(client) {
            s.released = Some(at);
            s.crashed = true;
        }
        self.down.insert(client, self.gaps.len());
        self.gaps.push(Gap {
            client,
            kind: GapKind::Crash,
            start: at,
            end: at,
        });
    }

    /// `client` restarted after a crash.
    pub fn restart(&mut self, client: usize, at: Duration) {
        self.saw(at);
        if let Some(i) = self.down.remove(&client) {
            self.gaps[i].end = at;
        }
    }

    /// A violation by `client` at `at`.
    pub fn violation(&mut self, client: usize, at: Duration, kind: ViolationKind) {
        self.saw(at);
        self.violations.push(Violation { client, at, kind });
    }

    /// The resource accepted a stale write of grant `grant`.
    pub fn stale_write(&mut self, grant: u64, at: Duration) {
        if let Some(&client) = self.grants.get(&grant) {
            self.violation(client, at, ViolationKind::StaleWrite);
        }
    }

    /// `deleter` deleted or overwrote `value`, which `writer` wrote in its current attempt:
    /// a foreign deletion if that attempt turns out to be a grant ([`Self::deleted_at_grant`]).
    pub fn deleted_early(&mut self, writer: usize, value: &[u8], deleter: usize, at: Duration) {
        self.deleted_early
            .insert((writer, value.to_vec()), (deleter, at));
    }

    /// `client`'s grant of `value` had been deleted before its acquire returned: the foreign
    /// deletion is marked where it happened, or at `at` if that was not seen.
    pub fn deleted_at_grant(&mut self, client: usize, value: &[u8], at: Duration) {
        let (deleter, when) = self
            .deleted_early
            .remove(&(client, value.to_vec()))
            .unwrap_or((client, at));
        self.violation(deleter, when, ViolationKind::ForeignDeletion);
    }

    /// The timeline of the trial that ran from `start` for `length`, with its counts.
    pub fn finish(
        mut self,
        names: (&str, &str, &str),
        clients: usize,
        start: Duration,
        length: Duration,
        caption: Caption,
    ) -> Timeline {
        let end = (start + length).max(self.last);
        for i in self.open.drain().map(|(_, i)| i) {
            self.sections[i].end = end;
        }
        for i in self.down.drain().map(|(_, i)| i) {
            self.gaps[i].end = end;
        }
        let (algorithm, scenario, expectation) = names;
        Timeline {
            algorithm: algorithm.to_owned(),
            scenario: scenario.to_owned(),
            expectation: expectation.to_owned(),
            clients,
            start,
            end,
            sections: self.sections,
            gaps: self.gaps,
            expiries: self.expiries,
            violations: self.violations,
            caption,
        }
    }
}

/// Timelines in lines of the picture: each verbatim recipe of [`PAIRS`] with its fix under
/// the same scenario side by side (recipe left), the others alone; pairs first, in the order
/// of their first timeline.
pub fn side_by_side(timelines: Vec<Timeline>) -> Vec<Vec<Timeline>> {
    let mut lines: Vec<Vec<Timeline>> = Vec::new();
    let mut rest: Vec<Option<Timeline>> = timelines.into_iter().map(Some).collect();
    let partner = |t: &Timeline, o: &Timeline| {
        t.scenario == o.scenario
            && PAIRS
                .iter()
                .any(|&(a, b)| t.algorithm == a && o.algorithm == b)
    };
    for i in 0..rest.len() {
        let Some(t) = rest[i].take() else { continue };
        let fix = (0..rest.len()).find(|&j| rest[j].as_ref().is_some_and(|o| partner(&t, o)));
        let flaw = (0..rest.len()).find(|&j| rest[j].as_ref().is_some_and(|o| partner(o, &t)));
        match (fix, flaw) {
            (Some(j), _) => lines.push(vec![t, rest[j].take().expect("found")]),
            (None, Some(j)) => lines.push(vec![rest[j].take().expect("found"), t]),
            (None, None) => lines.push(vec![t]),
        }
    }
    lines
}

// Layout, in pixels.
const MARGIN: f64 = 16.0;
const PANEL_W: f64 = 470.0;
const COLUMN_GAP: f64 = 24.0;
const LABEL_W: f64 = 26.0;
const HEADER_H: f64 = 22.0;
const ROW_H: f64 = 16.0;
const BAR_H: f64 = 10.0;
const AXIS_H: f64 = 18.0;
const CAPTION_LINE: f64 = 14.0;
const PANEL_GAP: f64 = 18.0;
const MARKER: f64 = 4.5;
const FONT: &str = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif";

// Colours: distinct in greyscale too (bars mid, readers light, violations red with a white
// halo and distinct shapes).
const RED: &str = "#c8102e";
const BAR_FILL: &str = "#6b9bd1";
const BAR_EDGE: &str = "#1f4e85";
const READ_FILL: &str = "#d5ecc9";
const READ_EDGE: &str = "#3d7a2a";
const INK: &str = "#1a1a1a";
const MUTED: &str = "#5a5a5a";

/// A rough width of `text` at `size` px (DejaVu Sans is among the widest sans fonts; this
/// errs wide).
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// `text` in lines of at most about `width` px at `size` px, broken at spaces.
fn wrap(text: &str, width: f64, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if !line.is_empty() && text_width(&candidate, size) > width {
            lines.push(std::mem::replace(&mut line, word.to_owned()));
        } else {
            line = candidate;
        }
    }
    lines.push(line);
    lines
}

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A violation marker centred on (`x`, `y`): diamond, cross or disc.
fn marker(out: &mut String, kind: ViolationKind, x: f64, y: f64, class: &str) {
    let r = MARKER;
    let style = format!("class=\"{class}\" fill=\"{RED}\" stroke=\"#fff\" stroke-width=\"1.2\"");
    let _ = match kind {
        ViolationKind::Overlap => writeln!(
            out,
            "<polygon {style} points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
            x,
            y - r - 0.8,
            x + r + 0.8,
            y,
            x,
            y + r + 0.8,
            x - r - 0.8,
            y
        ),
        ViolationKind::ForeignDeletion => {
            // A thick X, as one polygon.
            let (a, b) = (r, r * 0.42);
            let pts = [
                (-a, -a + b),
                (-a + b, -a),
                (0.0, -b),
                (a - b, -a),
                (a, -a + b),
                (b, 0.0),
                (a, a - b),
                (a - b, a),
                (0.0, b),
                (-a + b, a),
                (-a, a - b),
                (-b, 0.0),
            ];
            let pts: Vec<String> = pts
                .iter()
                .map(|(dx, dy)| format!("{:.1},{:.1}", x + dx, y + dy))
                .collect();
            writeln!(out, "<polygon {style} points=\"{}\"/>", pts.join(" "))
        }
        ViolationKind::StaleWrite => writeln!(
            out,
            "<circle {style} cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{:.1}\"/>",
            r * 0.9
        ),
        ViolationKind::LateDeadline => writeln!(
            out,
            "<polygon {style} points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
            x,
            y - r - 0.6,
            x + r + 0.6,
            y + r * 0.8,
            x - r - 0.6,
            y + r * 0.8
        ),
    };
}

/// The SVG of `lines` of timelines (see [`side_by_side`]) under `heading`: panels of one
/// trial each, sharing one time scale.
pub fn svg(heading: &str, lines: &[Vec<Timeline>]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(1).max(1) as f64;
    let width = 2.0 * MARGIN + columns * PANEL_W + (columns - 1.0) * COLUMN_GAP;
    let span = lines
        .iter()
        .flatten()
        .map(|t| t.end.saturating_sub(t.start))
        .max()
        .unwrap_or(Duration::from_millis(1))
        .max(Duration::from_millis(1));
    let mut body = String::new();
    let mut y = MARGIN;
    for line in wrap(heading, width - 2.0 * MARGIN, 15.0 * 1.05) {
        let _ = writeln!(
            body,
            "<text x=\"{MARGIN}\" y=\"{:.1}\" font-size=\"15\" font-weight=\"bold\" fill=\"{INK}\">{}</text>",
            y + 13.0,
            esc(&line)
        );
        y += 20.0;
    }
    y += 2.0;
    if columns > 1.0 {
        let _ = writeln!(
            body,
            "<text x=\"{MARGIN}\" y=\"{:.1}\" font-size=\"11.5\" fill=\"{MUTED}\">Each verbatim recipe (left) next to its fix (right): same scenario, same seed. Under each trial, its counts: the same as its JSON row.</text>",
            y + 8.0
        );
        y += 18.0;
    }
    y = legend(&mut body, y, width);
    y += 10.0;
    for line in lines {
        let mut bottom = y;
        for (i, t) in line.iter().enumerate() {
            let x = MARGIN + i as f64 * (PANEL_W + COLUMN_GAP);
            bottom = bottom.max(panel(&mut body, t, x, y, span));
        }
        y = bottom + PANEL_GAP;
    }
    let height = y - PANEL_GAP + MARGIN;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"{FONT}\">"
    );
    let _ = writeln!(out, "<title>{}</title>", esc(heading));
    out.push_str(DEFS);
    let _ = writeln!(
        out,
        "<rect width=\"{width:.0}\" height=\"{height:.0}\" fill=\"#fff\"/>"
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

const DEFS: &str = r##"<defs>
<pattern id="stall" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(45)">
<rect width="5" height="5" fill="#fff" fill-opacity="0.4"/>
<line x1="0" y1="0" x2="0" y2="5" stroke="#777" stroke-width="1.1"/>
</pattern>
<pattern id="outage" patternUnits="userSpaceOnUse" width="4" height="4">
<rect width="4" height="4" fill="#fff" fill-opacity="0.4"/>
<circle cx="2" cy="2" r="0.8" fill="#555"/>
</pattern>
<pattern id="crash" patternUnits="userSpaceOnUse" width="5" height="5">
<rect width="5" height="5" fill="#bbb"/>
<path d="M0,0 L5,5 M5,0 L0,5" stroke="#111" stroke-width="1"/>
</pattern>
</defs>
"##;

/// The legend, from `y`; returns the y below it.
fn legend(out: &mut String, y: f64, width: f64) -> f64 {
    const ITEMS: [&str; 7] = [
        "critical section, fencing token",
        "reader (shared)",
        "releasing",
        "stall",
        "crashed until restart",
        "lease ends",
        "acquire replies dropped",
    ];
    let mid = |y: f64| y + ROW_H / 2.0;
    // A grid of three columns (one on a narrow picture): the labels line up.
    let columns = if width > 900.0 { 3 } else { 1 };
    let column_w = (width - 2.0 * MARGIN) / f64::from(columns);
    let cell = |i: usize| {
        let (row, col) = (i / columns as usize, i % columns as usize);
        (
            MARGIN + col as f64 * column_w,
            y + row as f64 * (ROW_H + 3.0),
        )
    };
    for (i, label) in ITEMS.iter().enumerate() {
        let (x, y) = cell(i);
        let (top, m) = (mid(y) - BAR_H / 2.0, mid(y));
        let _ = match i {
            0 => writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"22\" height=\"{BAR_H}\" fill=\"{BAR_FILL}\" stroke=\"{BAR_EDGE}\" stroke-width=\"0.8\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"{INK}\">7</text>",
                x + 3.0,
                m + 3.2
            ),
            1 => writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"22\" height=\"{BAR_H}\" fill=\"{READ_FILL}\" stroke=\"{READ_EDGE}\" stroke-width=\"0.8\"/>"
            ),
            2 => writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{m:.1}\" x2=\"{:.1}\" y2=\"{m:.1}\" stroke=\"{BAR_EDGE}\" stroke-width=\"2\"/>",
                x + 22.0
            ),
            3 => writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"22\" height=\"12\" fill=\"url(#stall)\" stroke=\"#777\" stroke-width=\"0.6\"/>",
                m - 6.0
            ),
            4 => writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"22\" height=\"12\" fill=\"url(#crash)\" stroke=\"#111\" stroke-width=\"0.6\"/>",
                m - 6.0
            ),
            5 => {
                tick(out, x + 11.0, y);
                Ok(())
            }
            _ => writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"22\" height=\"12\" fill=\"url(#outage)\" stroke=\"#555\" stroke-width=\"0.6\"/>",
                m - 6.0
            ),
        };
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{INK}\">{}</text>",
            x + 28.0,
            m + 4.0,
            esc(label)
        );
    }
    for (i, kind) in ViolationKind::ALL.into_iter().enumerate() {
        let label = match kind {
            ViolationKind::Overlap => "overlap: entered while another was inside",
            ViolationKind::ForeignDeletion => "foreign deletion: removed a live holder's lock",
            ViolationKind::StaleWrite => "stale write accepted",
            ViolationKind::LateDeadline => {
                "late deadline: trusted beyond the lease's end on the server"
            }
        };
        let (x, y) = cell(ITEMS.len().next_multiple_of(columns as usize) + i);
        marker(out, kind, x + 6.0, mid(y), "key");
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{INK}\">{}</text>",
            x + 16.0,
            mid(y) + 4.0,
            esc(label)
        );
    }
    let band = ITEMS.len().next_multiple_of(columns as usize)
        + ViolationKind::ALL.len().next_multiple_of(columns as usize);
    let (x, band_y) = cell(band);
    let _ = writeln!(
        out,
        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"22\" height=\"{:.1}\" fill=\"{RED}\" fill-opacity=\"0.22\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"{INK}\">shaded: an overlap, while both are inside</text>",
        band_y + 1.0,
        ROW_H - 2.0,
        x + 28.0,
        mid(band_y) + 4.0
    );
    let rows = band / columns as usize + 1;
    y + rows as f64 * (ROW_H + 3.0)
}

/// A lease-end tick on the row whose top is `top`.
fn tick(out: &mut String, x: f64, top: f64) {
    let _ = writeln!(
        out,
        "<line class=\"expiry\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{INK}\" stroke-width=\"1.6\"/>",
        top + 1.0,
        top + ROW_H - 1.0
    );
}

/// A nice step for about `ticks` axis ticks over `span`.
fn axis_step(span: Duration, ticks: u32) -> Duration {
    let raw = span.as_secs_f64() / f64::from(ticks);
    let mut step = 1e-6;
    while step * 10.0 <= raw {
        step *= 10.0;
    }
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| step * m)
        .find(|s| *s >= raw)
        .unwrap_or(step * 10.0);
    Duration::from_secs_f64(step)
}

fn format_time(d: Duration, step: Duration) -> String {
    if step >= Duration::from_millis(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} µs", d.as_micros())
    }
}

/// How fencing tokens are written on the bars: as they are when they are short (counters),
/// else by rank in the trial (tokens taken from a clock run to 16 digits; their order is what
/// fencing needs).
struct FenceLabels {
    ranks: Option<Vec<u64>>,
}

impl FenceLabels {
    fn new(t: &Timeline) -> Self {
        let mut fences: Vec<u64> = t.sections.iter().filter_map(|s| s.fence).collect();
        if fences.iter().all(|&f| f < 10_000) {
            return FenceLabels { ranks: None };
        }
        fences.sort_unstable();
        fences.dedup();
        FenceLabels {
            ranks: Some(fences),
        }
    }

    fn by_rank(&self) -> bool {
        self.ranks.is_some()
    }

    fn label(&self, fence: Option<u64>) -> Option<String> {
        let fence = fence?;
        Some(match &self.ranks {
            None => fence.to_string(),
            Some(ranks) => format!("#{}", ranks.binary_search(&fence).ok()? + 1),
        })
    }
}

/// One panel at (`x`, `y`); returns its bottom.
fn panel(out: &mut String, t: &Timeline, x: f64, y: f64, span: Duration) -> f64 {
    let plot_x = x + LABEL_W;
    let plot_w = PANEL_W - LABEL_W - 8.0;
    let scale = plot_w / span.as_secs_f64();
    let px = |d: Duration| plot_x + d.saturating_sub(t.start).as_secs_f64() * scale;
    // Header: the algorithm and scenario, its expectation and verdict on the right.
    let _ = writeln!(
        out,
        "<g class=\"panel\" data-algorithm=\"{}\" data-scenario=\"{}\">",
        esc(&t.algorithm),
        esc(&t.scenario)
    );
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"12.5\" font-weight=\"bold\" fill=\"{INK}\">{} · {}</text>",
        y + 14.0,
        esc(&t.algorithm),
        esc(&t.scenario)
    );
    let verdict_colour = if t.caption.verdict == "BROKEN" {
        RED
    } else {
        MUTED
    };
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"{verdict_colour}\">{}: {}</text>",
        x + PANEL_W - 8.0,
        y + 14.0,
        esc(&t.expectation),
        esc(&t.caption.verdict)
    );
    let rows_top = y + HEADER_H;
    let rows_h = t.clients as f64 * ROW_H;
    let row_top = |c: usize| rows_top + c as f64 * ROW_H;
    // Row bands and labels.
    for c in 0..t.clients {
        let fill = if c % 2 == 0 { "#f3f3f3" } else { "#fff" };
        let _ = writeln!(
            out,
            "<rect x=\"{plot_x:.1}\" y=\"{:.1}\" width=\"{plot_w:.1}\" height=\"{ROW_H}\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"{MUTED}\">c{c}</text>",
            row_top(c),
            plot_x - 5.0,
            row_top(c) + ROW_H / 2.0 + 3.5
        );
    }
    // Crashes under everything, then the sections, then stalls over them (a stall inside a
    // section shows the bar through the hatching).
    for g in t.gaps.iter().filter(|g| g.kind == GapKind::Crash) {
        let (x0, x1) = (px(g.start), px(g.end).max(px(g.start) + 1.5));
        let _ = writeln!(
            out,
            "<rect class=\"crash\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" fill=\"url(#crash)\" stroke=\"#111\" stroke-width=\"0.6\"/>",
            row_top(g.client) + 2.0,
            x1 - x0
        );
    }
    let mid = |c: usize| row_top(c) + ROW_H / 2.0;
    for s in &t.sections {
        let (x0, x1) = (px(s.start), px(s.end).max(px(s.start) + 1.0));
        if let Some(r) = s.released.filter(|r| *r > s.end) {
            let _ = writeln!(
                out,
                "<line class=\"releasing\" x1=\"{x1:.1}\" y1=\"{m:.1}\" x2=\"{:.1}\" y2=\"{m:.1}\" stroke=\"{BAR_EDGE}\" stroke-width=\"2\"/>",
                px(r),
                m = mid(s.client)
            );
        }
        let (fill, edge) = if s.shared {
            (READ_FILL, READ_EDGE)
        } else {
            (BAR_FILL, BAR_EDGE)
        };
        let _ = writeln!(
            out,
            "<rect class=\"section\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{BAR_H}\" fill=\"{fill}\" stroke=\"{edge}\" stroke-width=\"0.8\"/>",
            mid(s.client) - BAR_H / 2.0,
            x1 - x0
        );
    }
    for g in t.gaps.iter().filter(|g| g.kind == GapKind::Stall) {
        let (x0, x1) = (px(g.start), px(g.end).max(px(g.start) + 1.5));
        let _ = writeln!(
            out,
            "<rect class=\"stall\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" fill=\"url(#stall)\" stroke=\"#777\" stroke-width=\"0.6\"/>",
            row_top(g.client) + 2.0,
            x1 - x0
        );
    }
    for g in t.gaps.iter().filter(|g| g.kind == GapKind::Outage) {
        let (x0, x1) = (px(g.start), px(g.end).max(px(g.start) + 1.5));
        let _ = writeln!(
            out,
            "<rect class=\"outage\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" fill=\"url(#outage)\" stroke=\"#555\" stroke-width=\"0.6\"/>",
            row_top(g.client) + 2.0,
            x1 - x0
        );
    }
    // Each overlap as a light red band over the rows of the clients inside together, for as
    // long as both are inside.
    for v in t
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::Overlap)
    {
        let Some(entering) = t
            .sections
            .iter()
            .find(|s| s.client == v.client && s.start == v.at)
        else {
            continue;
        };
        for other in t.sections.iter().filter(|o| {
            o.client != v.client
                && o.start <= v.at
                && o.end > v.at
                && !(o.shared && entering.shared)
        }) {
            let until = entering.end.min(other.end);
            let (top, bottom) = (
                row_top(v.client.min(other.client)) + 1.0,
                row_top(v.client.max(other.client)) + ROW_H - 1.0,
            );
            let _ = writeln!(
                out,
                "<rect class=\"together\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{RED}\" fill-opacity=\"0.22\"/>",
                px(v.at),
                (px(until) - px(v.at)).max(1.0),
                bottom - top
            );
        }
    }
    // What a label must not cover, by row: ticks and markers.
    let mut taken: HashMap<usize, Vec<(f64, f64)>> = HashMap::new();
    for &(c, at) in &t.expiries {
        if at <= t.end {
            let x = px(at);
            tick(out, x, row_top(c));
            taken.entry(c).or_default().push((x - 1.5, x + 1.5));
        }
    }
    // Markers: nudged right where they would cover each other on a row.
    let mut violations: Vec<&Violation> = t.violations.iter().collect();
    violations.sort_by_key(|v| (v.client, v.at));
    let mut previous: Option<(usize, f64)> = None;
    let mut markers = String::new();
    for v in violations {
        let mut x = px(v.at);
        if let Some((c, px)) = previous
            && c == v.client
        {
            x = x.max(px + 2.0 * MARKER + 2.5);
        }
        previous = Some((v.client, x));
        taken
            .entry(v.client)
            .or_default()
            .push((x - MARKER - 1.5, x + MARKER + 1.5));
        marker(
            &mut markers,
            v.kind,
            x,
            mid(v.client),
            &format!("violation {}", v.kind.class()),
        );
    }
    // Fencing tokens on the bars wide enough for them, where nothing else is.
    let fences = FenceLabels::new(t);
    for s in t.sections.iter().filter(|s| !s.shared) {
        let Some(label) = fences.label(s.fence) else {
            continue;
        };
        let w = text_width(&label, 9.0);
        let (x0, x1) = (px(s.start), px(s.end));
        let free = |a: f64, b: f64| {
            taken
                .get(&s.client)
                .is_none_or(|spans| spans.iter().all(|&(l, r)| b < l || a > r))
        };
        let spot = [x0 + 2.5, (x0 + x1 - w) / 2.0, x1 - 2.5 - w]
            .into_iter()
            .find(|&a| a >= x0 + 2.0 && a + w <= x1 - 2.0 && free(a, a + w));
        if let Some(a) = spot {
            let _ = writeln!(
                out,
                "<text class=\"fence\" x=\"{a:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"{INK}\">{label}</text>",
                mid(s.client) + 3.2
            );
        }
    }
    out.push_str(&markers);
    // The axis.
    let axis_y = rows_top + rows_h;
    let _ = writeln!(
        out,
        "<line x1=\"{plot_x:.1}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"{MUTED}\" stroke-width=\"0.8\"/>",
        plot_x + plot_w
    );
    let step = axis_step(span, 5);
    let mut d = Duration::ZERO;
    while d <= span {
        let tx = plot_x + d.as_secs_f64() * scale;
        let label = format_time(d, step);
        let lw = text_width(&label, 9.5);
        let anchor = if tx + lw / 2.0 > plot_x + plot_w + 6.0 {
            "end"
        } else {
            "middle"
        };
        let _ = writeln!(
            out,
            "<line x1=\"{tx:.1}\" y1=\"{axis_y:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"{MUTED}\" stroke-width=\"0.8\"/>\
             <text x=\"{tx:.1}\" y=\"{:.1}\" font-size=\"9.5\" text-anchor=\"{anchor}\" fill=\"{MUTED}\">{label}</text>",
            axis_y + 3.0,
            axis_y + 13.0
        );
        d += step;
    }
    // The caption: the trial's counts (the JSON row's), then its violations by kind.
    let c = &t.caption;
    let mut cy = axis_y + AXIS_H + 10.0;
    let counts = [
        ("acquisitions", c.acquisitions, false),
        ("writes rejected", c.writes_rejected, false),
        ("stalls", c.stalls, false),
        ("crashes", c.crashes, false),
        ("stuck locks", c.stuck_locks, c.stuck_locks > 0),
    ];
    let _ = write!(
        out,
        "<text class=\"count\" x=\"{x:.1}\" y=\"{cy:.1}\" font-size=\"10.5\" fill=\"{INK}\">"
    );
    for (i, (label, n, alarm)) in counts.into_iter().enumerate() {
        let sep = if i == 0 { "" } else { " · " };
        if alarm {
            let _ = write!(
                out,
                "{sep}<tspan fill=\"{RED}\" font-weight=\"bold\">{label} {n}</tspan>"
            );
        } else {
            let _ = write!(out, "{sep}{label} {n}");
        }
    }
    out.push_str("</text>\n");
    cy += CAPTION_LINE;
    let mut cx = x;
    for kind in ViolationKind::ALL {
        let n = c.count(kind);
        let text = format!("{} {n}", kind.label());
        marker(out, kind, cx + 5.0, cy - 3.5, "key");
        cx += 13.0;
        let (colour, weight) = if n > 0 {
            (RED, "bold")
        } else {
            (INK, "normal")
        };
        let _ = writeln!(
            out,
            "<text class=\"count\" x=\"{cx:.1}\" y=\"{cy:.1}\" font-size=\"10.5\" font-weight=\"{weight}\" fill=\"{colour}\">{}</text>",
            esc(&text)
        );
        cx += text_width(&text, 10.5) + 12.0;
    }
    if fences.by_rank() {
        cy += CAPTION_LINE;
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{cy:.1}\" font-size=\"10\" fill=\"{MUTED}\">fencing tokens are long numbers here: the bars number them in order</text>"
        );
    }
    out.push_str("</g>\n");
    cy + 4.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn timeline(algorithm: &str, scenario: &str) -> Timeline {
        let mut r = Recorder::new();
        r.enter(0, 1, ms(1), false);
        r.holding(0, Some(1), ms(101));
        r.violation(0, ms(1), ViolationKind::LateDeadline);
        r.stall(0, ms(2), ms(150));
        r.leave(0, ms(152));
        r.enter(1, 2, ms(120), false);
        r.violation(1, ms(120), ViolationKind::Overlap);
        r.holding(1, Some(2), ms(220));
        r.leave(1, ms(130));
        r.released(1, ms(131));
        r.stale_write(1, ms(152));
        r.deleted_early(1, b"v", 0, ms(153));
        r.deleted_at_grant(1, b"v", ms(160));
        r.crash(1, ms(170));
        r.restart(1, ms(220));
        let caption = Caption {
            acquisitions: 2,
            overlaps: 1,
            foreign_deletions: 1,
            stale_writes_accepted: 1,
            late_deadlines: 1,
            verdict: "flaws shown".to_owned(),
            ..Caption::default()
        };
        r.finish(
            (algorithm, scenario, "flawed"),
            2,
            Duration::ZERO,
            ms(200),
            caption,
        )
    }

    #[test]
    fn the_recorder_ties_each_event_to_its_client_and_moment() {
        let t = timeline("naive-setnx-expire", "long-stalls");
        assert_eq!(t.end, ms(220), "the axis reaches the last event");
        assert_eq!(t.sections.len(), 2);
        assert_eq!((t.sections[0].start, t.sections[0].end), (ms(1), ms(152)));
        assert_eq!(t.sections[0].fence, Some(1));
        assert_eq!(t.sections[1].released, Some(ms(131)));
        assert_eq!(
            t.violations,
            vec![
                Violation {
                    client: 0,
                    at: ms(1),
                    kind: ViolationKind::LateDeadline
                },
                Violation {
                    client: 1,
                    at: ms(120),
                    kind: ViolationKind::Overlap
                },
                // The stale write is the holder of grant 1's, client 0.
                Violation {
                    client: 0,
                    at: ms(152),
                    kind: ViolationKind::StaleWrite
                },
                // Marked on the deleter's row when it deleted, not at the victim's grant.
                Violation {
                    client: 0,
                    at: ms(153),
                    kind: ViolationKind::ForeignDeletion
                },
            ]
        );
        let crash = t.gaps.iter().find(|g| g.kind == GapKind::Crash).unwrap();
        assert_eq!(
            (crash.client, crash.start, crash.end),
            (1, ms(170), ms(220))
        );
        assert_eq!(t.expiries, vec![(0, ms(101)), (1, ms(220))]);
    }

    #[test]
    fn recipes_sit_next_to_their_fixes_under_the_same_scenario() {
        let lines = side_by_side(vec![
            timeline("expire-lock", "crashes"),
            timeline("naive-setnx-expire", "crashes"),
            timeline("fair-expire-lock", "crashes"),
            timeline("naive-setnx-expire", "long-stalls"),
            timeline("expire-lock", "long-stalls"),
        ]);
        let names: Vec<Vec<String>> = lines
            .iter()
            .map(|l| {
                l.iter()
                    .map(|t| format!("{} {}", t.algorithm, t.scenario))
                    .collect()
            })
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["naive-setnx-expire crashes", "expire-lock crashes"],
                vec!["fair-expire-lock crashes"],
                vec!["naive-setnx-expire long-stalls", "expire-lock long-stalls"],
            ]
        );
    }

    #[test]
    fn every_violation_is_one_marked_element_and_nothing_else_is() {
        let lines = side_by_side(vec![
            timeline("naive-setnx-expire", "long-stalls"),
            timeline("expire-lock", "long-stalls"),
        ]);
        let svg = svg("a <test> & more", &lines);
        assert_eq!(svg.matches("class=\"violation ").count(), 8);
        for kind in ViolationKind::ALL {
            assert_eq!(
                svg.matches(&format!("class=\"violation {}\"", kind.class()))
                    .count(),
                2,
                "{kind:?}"
            );
        }
        assert!(svg.contains("a &lt;test&gt; &amp; more"));
        assert!(!svg.contains("<script") && !svg.contains("href"));
    }

    #[test]
    fn a_fence_label_appears_only_where_the_bar_has_room() {
        let mut r = Recorder::new();
        r.enter(0, 1, ms(0), false);
        r.holding(0, Some(41), ms(500));
        r.leave(0, ms(300));
        r.enter(1, 2, ms(400), false);
        r.holding(1, Some(42), ms(900));
        r.leave(1, ms(401)); // a millisecond: under a pixel wide
        let t = r.finish(
            ("expire-lock", "short-stalls", "safe"),
            2,
            Duration::ZERO,
            ms(1000),
            Caption::default(),
        );
        let svg = svg("fences", &[vec![t]]);
        assert!(svg.contains(">41</text>"), "{svg}");
        assert!(!svg.contains(">42</text>"), "{svg}");
    }

    #[test]
    fn a_long_heading_wraps_at_spaces_and_keeps_every_word() {
        let text = "tairlock race: one trial each, 8 clients, lease 100ms, seed 1, embedded store";
        let lines = wrap(text, 300.0, 15.0);
        assert!(lines.len() > 1, "{lines:?}");
        assert!(
            lines.iter().all(|l| text_width(l, 15.0) <= 300.0),
            "{lines:?}"
        );
        assert_eq!(lines.join(" "), text);
    }

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(axis_step(ms(1000), 5), ms(200));
        assert_eq!(axis_step(ms(600), 5), ms(200));
        assert_eq!(axis_step(ms(3000), 5), ms(1000));
        assert_eq!(axis_step(ms(250), 5), ms(50));
    }
}
