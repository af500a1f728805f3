//! Runs the grammar: a small parsing-expression interpreter over the table `build.rs` compiles
//! from `grammar/vram.pest`.
//!
//! It follows pest's semantics step for step, because the diagnostics depend on them: implicit
//! whitespace between the items of a sequence or a repetition in non-atomic rules (the `skip`
//! that pest inserts), atomic and compound-atomic rules, lookahead, and above all pest's error
//! tracking. When parsing fails, the error is the furthest position any rule was tried at, with
//! the rules that failed there (expected) and those that matched inside a negative lookahead
//! (unexpected), recorded by the same rules in the same order as in pest's
//! `ParserState::rule`/`track` (pest 2.9). A test in `tests.rs` holds the trees and the errors
//! equal to those of pest's own generated parser over the examples, the bad-input corpus and
//! thousands of mutated files.

include!(concat!(env!("OUT_DIR"), "/grammar.rs"));

/// How a rule's body runs, after pest's code generator (`generate_rule`).
#[derive(Clone, Copy)]
enum Kind {
    /// `rule = { }`: a node, tracked, in the caller's atomicity.
    Normal,
    /// `rule = _{ }`: no node, not tracked.
    Silent,
    /// `WHITESPACE` and `COMMENT`: silent and atomic.
    Trivia,
    /// `rule = @{ }`: a node without inner nodes, no implicit whitespace inside.
    Atomic,
    /// `rule = ${ }`: a node with inner nodes, no implicit whitespace inside.
    CompoundAtomic,
}

/// One operation of a rule body; indices point into `OPS` (operands) or `LISTS` (start, length).
#[derive(Clone, Copy)]
enum Op {
    Str(&'static str),
    Range(char, char),
    Call(Rule),
    Soi,
    Eoi,
    PosPred(u16),
    NegPred(u16),
    Opt(u16),
    Rep(u16),
    Seq(u16, u16),
    Choice(u16, u16),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lookahead {
    None,
    Positive,
    Negative,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Atomicity {
    Atomic,
    CompoundAtomic,
    NonAtomic,
}

/// A matched rule, in pre-order: its children follow it, up to `subtree_end` (exclusive).
#[derive(Clone, Copy, Debug)]
struct Node {
    rule: Rule,
    start: usize,
    end: usize,
    subtree_end: usize,
}

/// A failed parse: the furthest position tried, and what was expected and unexpected there,
/// sorted in rule order without repeats (as pest reports them).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SyntaxError {
    pub(super) pos: usize,
    pub(super) positives: Vec<Rule>,
    pub(super) negatives: Vec<Rule>,
}

/// A parsed text: the matched rules in pre-order.
pub(super) struct Tree<'i> {
    input: &'i str,
    nodes: Vec<Node>,
}

impl Tree<'_> {
    /// The root rule's node (the tree is never empty).
    pub(super) fn root(&self) -> Pair<'_> {
        Pair { input: self.input, nodes: &self.nodes, index: 0 }
    }
}

/// One matched rule and its text, with its children.
#[derive(Clone, Copy)]
pub(super) struct Pair<'t> {
    input: &'t str,
    nodes: &'t [Node],
    index: usize,
}

impl<'t> Pair<'t> {
    pub(super) fn as_rule(&self) -> Rule {
        self.nodes[self.index].rule
    }

    pub(super) fn start(&self) -> usize {
        self.nodes[self.index].start
    }

    pub(super) fn end(&self) -> usize {
        self.nodes[self.index].end
    }

    pub(super) fn as_str(&self) -> &'t str {
        &self.input[self.start()..self.end()]
    }

    /// The direct children, in order.
    pub(super) fn into_inner(self) -> Pairs<'t> {
        let node = self.nodes[self.index];
        Pairs { input: self.input, nodes: self.nodes, next: self.index + 1, end: node.subtree_end }
    }

    /// How many rules matched inside this one, at any depth.
    pub(super) fn descendants(&self) -> usize {
        self.nodes[self.index].subtree_end - self.index - 1
    }
}

/// The children of a [`Pair`].
#[derive(Clone)]
pub(super) struct Pairs<'t> {
    input: &'t str,
    nodes: &'t [Node],
    next: usize,
    end: usize,
}

impl<'t> Iterator for Pairs<'t> {
    type Item = Pair<'t>;

    fn next(&mut self) -> Option<Pair<'t>> {
        if self.next >= self.end {
            return None;
        }
        let pair = Pair { input: self.input, nodes: self.nodes, index: self.next };
        self.next = self.nodes[self.next].subtree_end;
        Some(pair)
    }
}

/// Parses `input` as `rule`.
pub(super) fn parse(rule: Rule, input: &str) -> Result<Tree<'_>, SyntaxError> {
    let mut parser = Parser {
        input,
        pos: 0,
        nodes: Vec::new(),
        lookahead: Lookahead::None,
        atomicity: Atomicity::NonAtomic,
        attempt_pos: 0,
        pos_attempts: Vec::new(),
        neg_attempts: Vec::new(),
    };
    if parser.call(rule) {
        return Ok(Tree { input, nodes: parser.nodes });
    }
    let Parser { attempt_pos, mut pos_attempts, mut neg_attempts, .. } = parser;
    for attempts in [&mut pos_attempts, &mut neg_attempts] {
        attempts.sort_unstable();
        attempts.dedup();
    }
    Err(SyntaxError { pos: attempt_pos, positives: pos_attempts, negatives: neg_attempts })
}

/// The interpreter's state, pest's `ParserState` without the stack operations the grammar does
/// not use. Every operation returns whether it matched; a failed one leaves `pos` where it was.
struct Parser<'i> {
    input: &'i str,
    pos: usize,
    nodes: Vec<Node>,
    lookahead: Lookahead,
    atomicity: Atomicity,
    attempt_pos: usize,
    pos_attempts: Vec<Rule>,
    neg_attempts: Vec<Rule>,
}

impl Parser<'_> {
    fn call(&mut self, rule: Rule) -> bool {
        let (kind, body) = BODIES[rule as usize];
        match kind {
            Kind::Normal => self.rule(rule, |p| p.run(body, false)),
            Kind::Silent => self.run(body, false),
            Kind::Trivia => self.atomic(Atomicity::Atomic, |p| p.run(body, true)),
            Kind::Atomic => self.rule(rule, |p| p.atomic(Atomicity::Atomic, |p| p.run(body, true))),
            Kind::CompoundAtomic => {
                self.atomic(Atomicity::CompoundAtomic, |p| p.rule(rule, |p| p.run(body, true)))
            }
        }
    }

    /// Runs operation `op`. `atomic_body` is whether the rule it belongs to was written atomic,
    /// which decides (statically, as in pest's generated code) where `skip` is inserted; whether
    /// `skip` then skips anything depends on the atomicity in force.
    fn run(&mut self, op: u16, atomic_body: bool) -> bool {
        match OPS[usize::from(op)] {
            Op::Str(text) => self.advance_if(self.input[self.pos..].starts_with(text), text.len()),
            Op::Range(low, high) => match self.input[self.pos..].chars().next() {
                Some(c) => self.advance_if((low..=high).contains(&c), c.len_utf8()),
                None => false,
            },
            Op::Soi => self.pos == 0,
            Op::Eoi => self.pos == self.input.len(),
            Op::Call(rule) => self.call(rule),
            Op::PosPred(inner) => self.lookahead(true, |p| p.run(inner, atomic_body)),
            Op::NegPred(inner) => self.lookahead(false, |p| p.run(inner, atomic_body)),
            Op::Opt(inner) => {
                self.run(inner, atomic_body);
                true
            }
            Op::Rep(inner) => {
                if atomic_body {
                    while self.run(inner, true) {}
                } else if self.run(inner, false) {
                    while self.sequence(|p| {
                        p.skip();
                        p.run(inner, false)
                    }) {}
                }
                true
            }
            Op::Seq(start, len) => self.sequence(|p| {
                list(start, len).enumerate().all(|(i, item)| {
                    if i > 0 && !atomic_body {
                        p.skip();
                    }
                    p.run(item, atomic_body)
                })
            }),
            Op::Choice(start, len) => list(start, len).any(|item| self.run(item, atomic_body)),
        }
    }

    fn advance_if(&mut self, matched: bool, len: usize) -> bool {
        if matched {
            self.pos += len;
        }
        matched
    }

    /// pest's implicit whitespace: `WHITESPACE*` then `(COMMENT WHITESPACE*)*`, only where the
    /// atomicity in force is non-atomic. It always succeeds.
    fn skip(&mut self) {
        if self.atomicity != Atomicity::NonAtomic {
            return;
        }
        while self.call(Rule::WHITESPACE) {}
        while self.call(Rule::COMMENT) {
            while self.call(Rule::WHITESPACE) {}
        }
    }

    /// Runs `f`; when it fails, puts the position and the nodes back as they were.
    fn sequence(&mut self, f: impl FnOnce(&mut Self) -> bool) -> bool {
        let (pos, nodes) = (self.pos, self.nodes.len());
        let matched = f(self);
        if !matched {
            self.pos = pos;
            self.nodes.truncate(nodes);
        }
        matched
    }

    fn lookahead(&mut self, positive: bool, f: impl FnOnce(&mut Self) -> bool) -> bool {
        let outer = self.lookahead;
        let negative = (outer == Lookahead::Negative) == positive;
        self.lookahead = if negative { Lookahead::Negative } else { Lookahead::Positive };
        let pos = self.pos;
        let matched = f(self);
        self.pos = pos;
        self.lookahead = outer;
        matched == positive
    }

    fn atomic(&mut self, atomicity: Atomicity, f: impl FnOnce(&mut Self) -> bool) -> bool {
        let outer = self.atomicity;
        self.atomicity = atomicity;
        let matched = f(self);
        self.atomicity = outer;
        matched
    }

    /// A named rule: records its node, and tracks it for the error when it fails (or, inside a
    /// negative lookahead, when it matches), as pest's `ParserState::rule` does.
    fn rule(&mut self, rule: Rule, f: impl FnOnce(&mut Self) -> bool) -> bool {
        let start = self.pos;
        let index = self.nodes.len();
        let (pos_index, neg_index) = if start == self.attempt_pos {
            (self.pos_attempts.len(), self.neg_attempts.len())
        } else {
            (0, 0)
        };
        let records = self.lookahead == Lookahead::None && self.atomicity != Atomicity::Atomic;
        if records {
            self.nodes.push(Node { rule, start, end: start, subtree_end: index + 1 });
        }
        let attempts = self.attempts_at(start);
        let matched = f(self);
        if matched == (self.lookahead == Lookahead::Negative) {
            self.track(rule, start, pos_index, neg_index, attempts);
        }
        if records {
            if matched {
                let subtree_end = self.nodes.len();
                self.nodes[index].end = self.pos;
                self.nodes[index].subtree_end = subtree_end;
            } else {
                self.nodes.truncate(index);
            }
        }
        matched
    }

    fn attempts_at(&self, pos: usize) -> usize {
        if self.attempt_pos == pos { self.pos_attempts.len() + self.neg_attempts.len() } else { 0 }
    }

    fn track(&mut self, rule: Rule, pos: usize, pos_index: usize, neg_index: usize, before: usize) {
        if self.atomicity == Atomicity::Atomic {
            return;
        }
        // When exactly one attempt was recorded inside this rule at its own position, that
        // inner rule says more than this one: keep it instead.
        let now = self.attempts_at(pos);
        if now > before && now - before == 1 {
            return;
        }
        if pos == self.attempt_pos {
            self.pos_attempts.truncate(pos_index);
            self.neg_attempts.truncate(neg_index);
        }
        if pos > self.attempt_pos {
            self.pos_attempts.clear();
            self.neg_attempts.clear();
            self.attempt_pos = pos;
        }
        if pos == self.attempt_pos {
            if self.lookahead == Lookahead::Negative {
                self.neg_attempts.push(rule);
            } else {
                self.pos_attempts.push(rule);
            }
        }
    }
}

/// The operations of a list operand.
fn list(start: u16, len: u16) -> impl Iterator<Item = u16> {
    LISTS[usize::from(start)..usize::from(start) + usize::from(len)].iter().copied()
}
