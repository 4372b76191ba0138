//! The statement budget: how large and how deep a statement may be before
//! anything plans it.
//!
//! Every later stage (our binder, DataFusion's planner and optimizer,
//! `Display`, even `Drop`) walks a statement tree by recursion, so a tree
//! deeper than a thread's stack aborts the whole process. sqlparser bounds
//! the nesting it parses by recursion (parentheses, subqueries) but builds
//! left-deep chains in loops: `1 & 1 & 1 …`, `'a'::text::text …`,
//! `x IS NULL IS NULL …`, `SELECT 1 UNION SELECT 1 …`, `int[][][] …`. A
//! statement within the 1 MiB text limit can hold half a million levels.
//!
//! Parsing itself costs memory: sqlparser's tokens and tree take two
//! orders of magnitude more than the text, so texts over
//! [`LARGE_STATEMENT_BYTES`] parse a few at a time, server-wide
//! ([`admit`]), and memory stays bounded however many clients send them.
//!
//! A tree is also dropped when the parser fails part-way (`1 + 1 + … FROM`):
//! sqlparser drops what it built so far by recursion, before any check of
//! ours can run. So large texts are parsed, checked and (if refused)
//! dropped on a stack of their own, sized for the deepest chain a text
//! within the size limit can hold ([`on_parse_stack`]).
//!
//! Two checks, whatever the operators:
//! - before parsing, on the tokens, the chains that are not expressions
//!   (set operations, array type declarators), so those trees are never
//!   built;
//! - after parsing, on the tree: expression depth, expression count and
//!   parameter numbers. The walk stops descending at the depth limit and
//!   cuts what lies below onto a heap stack, which is then taken apart a
//!   limit's depth at a time, so even a refused tree is walked and dropped
//!   without deep recursion.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Statement, Value, ValueWithSpan, VisitMut, VisitorMut};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{PlanError, Result};

/// Longest statement text accepted.
pub const MAX_STATEMENT_BYTES: usize = 1 << 20;
/// Deepest expression nesting (operator chains count one level per
/// operator). PostgreSQL refuses by stack depth instead (54001 at its
/// 2 MB `max_stack_depth`); this bound leaves DataFusion's recursive
/// optimizer room on an 8 MiB thread.
pub const MAX_DEPTH: usize = 2_000;
/// Most expression nodes in one statement: a bound on planning work and
/// memory. A 1 MiB multi-row INSERT of short values stays under it.
pub const MAX_NODES: usize = 250_000;
/// Most UNION / INTERSECT / EXCEPT in one statement (a left-deep chain).
pub const MAX_SET_OPERATIONS: usize = 1_000;
/// Longest run of array type declarators (`int[][]…`, a left-deep chain).
/// PostgreSQL ignores declared dimensions; arrays have at most 6.
pub const MAX_ARRAY_DECLARATORS: usize = 100;
/// Deepest nesting of parentheses. sqlparser 0.62 backtracks on nested
/// parentheses and function calls, about doubling its work per level
/// (fixed upstream in later versions): without this bound a statement of
/// a few dozen bytes could hold a core for hours.
pub const MAX_NESTING: usize = 16;
/// Highest parameter number: the protocol counts parameters in 16 bits.
pub const MAX_PARAMETER: usize = 65_535;

/// Texts longer than this are parsed at most [`LARGE_PARSES`] at a time.
pub const LARGE_STATEMENT_BYTES: usize = 16 * 1024;
/// Large texts parsed at once, server-wide.
pub const LARGE_PARSES: usize = 2;
/// Longest wait for a turn before the statement is refused (53000).
pub const LARGE_PARSE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A turn to parse (and plan) a large text; dropped when done.
#[derive(Debug)]
pub struct LargeParse {
    /// The thread's first turn (the one counted server-wide); nested
    /// turns of the same thread only count depth.
    first: bool,
}

static LARGE: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

thread_local! {
    /// Turns this thread holds: a thread that holds one parses again
    /// without waiting (the analytics path parses its text twice), so two
    /// threads can never wait on each other.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Drop for LargeParse {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        if self.first {
            let mut running = LARGE.0.lock().unwrap_or_else(|e| e.into_inner());
            *running -= 1;
            LARGE.1.notify_one();
        }
    }
}

/// Waits for a turn if `sql` is large (a connection's own thread waits;
/// nothing else does); `None` for ordinary texts. Hold the turn while the
/// text's trees are alive, and on the thread that took it. A wait longer
/// than [`LARGE_PARSE_WAIT`] is refused: the waiting thread cannot see a
/// cancel request, so the wait itself is bounded.
pub fn admit(sql: &str) -> Result<Option<LargeParse>> {
    admit_within(sql, LARGE_PARSE_WAIT)
}

fn admit_within(sql: &str, wait: std::time::Duration) -> Result<Option<LargeParse>> {
    if sql.len() <= LARGE_STATEMENT_BYTES {
        return Ok(None);
    }
    let first = HELD.with(|h| h.get()) == 0;
    if first {
        let deadline = std::time::Instant::now() + wait;
        let mut running = LARGE.0.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= LARGE_PARSES {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(PlanError::Busy(format!(
                    "{LARGE_PARSES} statements over {} KiB were being parsed for {} ms",
                    LARGE_STATEMENT_BYTES >> 10,
                    wait.as_millis()
                )));
            }
            running = LARGE
                .1
                .wait_timeout(running, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *running += 1;
    }
    HELD.with(|h| h.set(h.get() + 1));
    Ok(Some(LargeParse { first }))
}

/// Stack for parsing a large text: the deepest chain 1 MiB can hold is
/// about 520,000 levels, and dropping one level takes up to a few hundred
/// bytes of stack. Address space only: pages are touched as used.
const PARSE_STACK_BYTES: usize = 512 << 20;

/// Runs `f` (parse and check `sql`) on a stack large enough to drop the
/// deepest tree `sql` can hold; ordinary texts (too short to nest deeper
/// than a thread's stack allows) run where they are.
pub(crate) fn on_parse_stack<T>(sql: &str, f: impl FnOnce() -> T) -> T {
    if sql.len() <= LARGE_STATEMENT_BYTES {
        return f();
    }
    stacker::grow(PARSE_STACK_BYTES, f)
}

/// Refuses a text over the size limit.
pub(crate) fn check_length(sql: &str) -> Result<()> {
    if sql.len() > MAX_STATEMENT_BYTES {
        return Err(PlanError::TooComplex {
            message: format!(
                "statement is {} bytes; the limit is {MAX_STATEMENT_BYTES}",
                sql.len()
            ),
            too_long: true,
        });
    }
    Ok(())
}

/// Refuses chains the parser would build without bounding their depth.
pub(crate) fn check_text(sql: &str) -> Result<()> {
    // A short text cannot hold enough set operations to matter, nor nest
    // deeper than it has parentheses; array declarators are looked for
    // wherever there is a bracket.
    let opens = sql.bytes().filter(|b| *b == b'(').count();
    if sql.len() <= 4 * MAX_SET_OPERATIONS && !sql.contains('[') && opens <= MAX_NESTING {
        return Ok(());
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| PlanError::Syntax {
            message: e.to_string(),
            position: None,
        })?;
    let mut set_operations = 0;
    let (mut depth, mut deepest) = (0usize, 0usize);
    // `[]` and `[n]` pairs in a row, as in `int[][][]`.
    let (mut dims, mut deepest_dims) = (0usize, 0usize);
    let mut last = [&Token::EOF; 2];
    for t in tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_))) {
        if let Token::Word(w) = t
            && matches!(
                w.keyword,
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT
            )
        {
            set_operations += 1;
        }
        match t {
            Token::LParen => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if matches!(t, Token::RBracket) {
            let pair = matches!(last[1], Token::LBracket)
                || (matches!(last[1], Token::Number(..)) && matches!(last[0], Token::LBracket));
            if pair {
                dims += 1;
                deepest_dims = deepest_dims.max(dims);
            }
        } else if !matches!(t, Token::LBracket | Token::Number(..)) {
            dims = 0;
        }
        last = [last[1], t];
    }
    if deepest > MAX_NESTING {
        return Err(too_complex(format!(
            "statement nests parentheses {deepest} deep; the limit is {MAX_NESTING}"
        )));
    }
    if set_operations > MAX_SET_OPERATIONS {
        return Err(too_complex(format!(
            "statement has {set_operations} set operations (UNION, INTERSECT, EXCEPT); the limit is {MAX_SET_OPERATIONS}"
        )));
    }
    if deepest_dims > MAX_ARRAY_DECLARATORS {
        return Err(too_complex(format!(
            "statement declares an array type with {deepest_dims} dimensions; the limit is {MAX_ARRAY_DECLARATORS}"
        )));
    }
    Ok(())
}

/// Checks parsed statements against the budget. On an error the trees have
/// already been cut to a safe depth, so dropping them is safe.
pub(crate) fn check_tree(stmts: &mut [Statement]) -> Result<()> {
    let mut walk = Walk::default();
    for s in stmts.iter_mut() {
        let _ = s.visit(&mut walk);
    }
    let Walk {
        cut,
        nodes,
        parameter,
        ..
    } = walk;
    let too_deep = !cut.is_empty();
    dismantle(cut);
    if let Some(p) = parameter {
        return Err(PlanError::NoSuchParameter {
            message: format!("there is no parameter {p}"),
        });
    }
    if too_deep {
        return Err(too_complex(format!(
            "expression nesting is deeper than {MAX_DEPTH} levels"
        )));
    }
    if nodes > MAX_NODES {
        return Err(too_complex(format!(
            "statement has {nodes} expressions; the limit is {MAX_NODES}"
        )));
    }
    Ok(())
}

fn too_complex(message: String) -> PlanError {
    PlanError::TooComplex {
        message,
        too_long: false,
    }
}

/// The budget's walk: counts expressions, tracks their depth, cuts below
/// the limit, and notes the first parameter number out of range.
#[derive(Default)]
struct Walk {
    depth: usize,
    nodes: usize,
    cut: Vec<Expr>,
    parameter: Option<String>,
}

impl VisitorMut for Walk {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        self.depth += 1;
        self.nodes += 1;
        if self.depth > MAX_DEPTH {
            // What lies below goes to the heap; the walk goes on over the
            // placeholder, which has no children.
            self.cut
                .push(std::mem::replace(expr, Expr::value(Value::Null)));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _expr: &mut Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
        if let Value::Placeholder(p) = &value.value
            && self.parameter.is_none()
            && !p
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| (1..=MAX_PARAMETER).contains(&n))
            // `?` and `:name` placeholders are not PostgreSQL's; whoever
            // binds them refuses them.
            && p.starts_with('$')
        {
            self.parameter = Some(p.clone());
        }
        ControlFlow::Continue(())
    }
}

/// Drops cut subtrees a limit's depth at a time, never recursing deeper
/// than the limit.
fn dismantle(mut cut: Vec<Expr>) {
    while let Some(mut e) = cut.pop() {
        let mut walk = Walk::default();
        let _ = e.visit(&mut walk);
        cut.append(&mut walk.cut);
        drop(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Planner;

    fn code(sql: &str) -> Option<&'static str> {
        match Planner::parse(sql) {
            Ok(_) => None,
            Err(PlanError::TooComplex { too_long: true, .. }) => Some("54000"),
            Err(PlanError::TooComplex { .. }) => Some("54001"),
            Err(PlanError::NoSuchParameter { .. }) => Some("42P02"),
            Err(PlanError::Syntax { .. }) => Some("42601"),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }

    /// A thread with the connection threads' stack: a refusal must cost
    /// no more stack than an answer.
    fn on_conn_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn every_chain_form_is_refused_without_overflowing() {
        on_conn_stack(|| {
            let chains = [
                format!("SELECT 1{}", "&1".repeat(300_000)),
                format!("SELECT 'a'{}", "::text".repeat(100_000)),
                format!("SELECT 1{}", " IS NULL".repeat(100_000)),
                format!("SELECT x{}", "->'a'".repeat(150_000)),
                format!("SELECT 1{}", "<<1".repeat(300_000)),
                format!("SELECT 1{}", "#1".repeat(300_000)),
                format!(
                    "SELECT 1 FROM t WHERE {}",
                    "a=1 OR ".repeat(100_000) + "a=1"
                ),
                format!("SELECT 1{}", " AT TIME ZONE 'UTC'".repeat(50_000)),
            ];
            for sql in &chains {
                assert_eq!(code(sql), Some("54001"), "{}", &sql[..40]);
            }
            let unions = format!("SELECT 1{}", " UNION SELECT 1".repeat(60_000));
            assert_eq!(code(&unions), Some("54001"));
            let arrays = format!("SELECT NULL::int{}", "[]".repeat(400_000));
            assert_eq!(code(&arrays), Some("54001"));
            let arrays = format!("SELECT NULL::int{}", "[]".repeat(MAX_ARRAY_DECLARATORS + 1));
            assert_eq!(code(&arrays), Some("54001"));
            let arrays = format!("SELECT NULL::int{}", "[]".repeat(MAX_ARRAY_DECLARATORS));
            assert_eq!(code(&arrays), None);
            // A chain the parser fails on part-way: it drops what it built.
            for tail in [" FROM", "+", "; SELEC"] {
                let broken = format!("SELECT 1{}{tail}", "+1".repeat(400_000));
                assert_eq!(code(&broken), Some("42601"), "{tail}");
            }
            let nested = format!("SELECT {}1{}", "(".repeat(10_000), ")".repeat(10_000));
            assert_eq!(code(&nested), Some("54001"));
            let minus = format!("SELECT {}1", "- ".repeat(100_000));
            assert_eq!(code(&minus), Some("54001"));
        });
    }

    #[test]
    fn the_limits_are_where_they_say() {
        on_conn_stack(|| {
            let chain = |n: usize| format!("SELECT a FROM t WHERE a = 0{}", " OR a = 1".repeat(n));
            // MAX_DEPTH levels: the chain's OR nodes plus their operands.
            assert_eq!(code(&chain(MAX_DEPTH - 2)), None);
            assert_eq!(code(&chain(MAX_DEPTH + 1)), Some("54001"));
            let unions = |n: usize| format!("SELECT 1{}", " UNION SELECT 1".repeat(n));
            assert_eq!(code(&unions(MAX_SET_OPERATIONS)), None);
            assert_eq!(code(&unions(MAX_SET_OPERATIONS + 1)), Some("54001"));
            // A wide statement is fine up to the node budget.
            let values = |n: usize| format!("INSERT INTO t VALUES {}", vec!["(1)"; n].join(","));
            assert_eq!(code(&values(200_000)), None);
            assert_eq!(code(&values(MAX_NODES + 1)), Some("54001"));
            assert_eq!(
                code(&format!("SELECT '{}'", "x".repeat(MAX_STATEMENT_BYTES))),
                Some("54000")
            );
        });
    }

    #[test]
    fn a_wait_for_a_large_parse_turn_is_bounded() {
        let large = "x".repeat(LARGE_STATEMENT_BYTES + 1);
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = std::sync::Arc::new(std::sync::Mutex::new(released));
        let (took, taken) = std::sync::mpsc::channel();
        let holders: Vec<_> = (0..LARGE_PARSES)
            .map(|_| {
                let (large, released, took) = (large.clone(), released.clone(), took.clone());
                std::thread::spawn(move || {
                    let turn = admit(&large).unwrap();
                    took.send(()).unwrap();
                    let _ = released.lock().unwrap().recv();
                    drop(turn);
                })
            })
            .collect();
        for _ in 0..LARGE_PARSES {
            taken.recv().unwrap();
        }
        let e = admit_within(&large, std::time::Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, PlanError::Busy(_)), "{e}");
        // Small texts never wait.
        assert!(
            admit_within("SELECT 1", std::time::Duration::ZERO)
                .unwrap()
                .is_none()
        );
        drop(release);
        for h in holders {
            h.join().unwrap();
        }
        assert!(admit(&large).unwrap().is_some());
    }

    #[test]
    fn nesting_is_bounded_before_the_parser_backtracks() {
        // A fuzz finding: 129 bytes that held the parser for minutes.
        let fuzz = "EXPLAIN (AYALYZE((LAIN (AYALYZE(((Recidu(N (Residu(N (A (AYALYZE(((Recidu(N (Residu(N (A(#(((RN (AO(Recidu(N (Residu(N (A(#(((RN ";
        assert_eq!(code(fuzz), Some("54001"));
        let calls = |n: usize| format!("SELECT {}1{}", "a(b(".repeat(n), "))".repeat(n));
        assert_eq!(code(&calls(MAX_NESTING / 2)), None);
        assert_eq!(code(&calls(MAX_NESTING / 2 + 1)), Some("54001"));
        let from = |n: usize| format!("SELECT 1 FROM {}t{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(code(&from(MAX_NESTING + 1)), Some("54001"));
        // Parentheses inside literals and identifiers do not count.
        let quoted = format!("SELECT '{}', \"{}\"", "(".repeat(40), "(".repeat(40));
        assert_eq!(code(&quoted), None);
    }

    #[test]
    fn parameter_numbers_stop_at_the_protocols_limit() {
        assert_eq!(code("SELECT $65535"), None);
        for p in ["$65536", "$100000000000", "$0", "$99999999999999999999999"] {
            let sql = format!("SELECT a FROM t WHERE a = {p}");
            assert_eq!(code(&sql), Some("42P02"), "{p}");
            let sql = format!("PREPARE q AS SELECT a FROM t WHERE a = {p}");
            assert_eq!(code(&sql), Some("42P02"), "{p}");
            let sql = format!("INSERT INTO t VALUES ({p})");
            assert_eq!(code(&sql), Some("42P02"), "{p}");
        }
    }
}
