//! The parse tree's pairs to the typed [`crate::ast`], one function per grammar rule.
//!
//! `expect`/`unreachable!` here only guard shapes the grammar guarantees. Anything a user can get
//! wrong (a number with 40 digits, say) becomes a diagnostic.

use super::peg::{Pair, Pairs, Rule};
use crate::ast::{
    BinaryOp, Block, BlockDeclaration, Check, CountOf, Declaration, DeclarationKind, Expr, Field,
    File, Find, FindGoal, Ident, SplitPart, Target, Text, Unit, Value,
};
use crate::diagnostic::Diagnostic;
use crate::limits::{MAX_DIGITS, MAX_EXPRESSION_TERMS};
use crate::ratio::Ratio;
use crate::span::Span;

/// Lowering state: the chunk's offset in the whole source, and the diagnostics found so far.
struct Lowerer {
    offset: usize,
    diagnostics: Vec<Diagnostic>,
}

pub(super) fn lower_file(pair: Pair<'_>, offset: usize) -> (File, Vec<Diagnostic>) {
    let mut lowerer = Lowerer { offset, diagnostics: Vec::new() };
    let mut file = File::default();
    for pair in pair.into_inner() {
        match pair.as_rule() {
            Rule::block_declaration => {
                let decl = lowerer.lower_block_declaration(pair);
                file.declarations.push(Declaration::Block(decl));
            }
            Rule::check => file.declarations.push(Declaration::Check(lowerer.lower_check(pair))),
            Rule::find => file.declarations.push(Declaration::Find(lowerer.lower_find(pair))),
            Rule::EOI => {}
            rule => unreachable!("file holds declarations only, got {rule:?}"),
        }
    }
    (file, lowerer.diagnostics)
}

fn next<'t>(pairs: &mut Pairs<'t>) -> Pair<'t> {
    pairs.next().expect("the grammar guarantees this child")
}

impl Lowerer {
    fn span(&self, pair: &Pair<'_>) -> Span {
        Span::new(pair.start() + self.offset, pair.end() + self.offset)
    }

    fn lower_block_declaration(&mut self, pair: Pair<'_>) -> BlockDeclaration {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let kind = match next(&mut inner).as_str() {
            "device" => DeclarationKind::Device,
            "machine" => DeclarationKind::Machine,
            "model" => DeclarationKind::Model,
            "workload" => DeclarationKind::Workload,
            "headroom" => DeclarationKind::Headroom,
            other => unreachable!("declaration_kind matched {other:?}"),
        };
        let name = self.lower_name(next(&mut inner));
        let mut title = None;
        let mut body = Block::default();
        for pair in inner {
            match pair.as_rule() {
                Rule::title => title = Some(self.lower_title(pair)),
                Rule::block => body = self.lower_block(pair),
                rule => unreachable!("block declaration child {rule:?}"),
            }
        }
        BlockDeclaration { kind, name, title, body, span }
    }

    fn lower_check(&mut self, pair: Pair<'_>) -> Check {
        let span = self.span(&pair);
        let mut title = None;
        let mut workload = None;
        let mut also = Vec::new();
        let mut target = None;
        let mut split = Vec::new();
        let mut stage_layers = Vec::new();
        let mut headroom = None;
        for pair in pair.into_inner() {
            match pair.as_rule() {
                Rule::keyword_check | Rule::keyword_on => {}
                Rule::title => title = Some(self.lower_title(pair)),
                Rule::name => workload = Some(self.lower_name(pair)),
                Rule::co_resident => {
                    let name = pair.into_inner().next().expect("co_resident has a name");
                    also.push(self.lower_name(name));
                }
                Rule::target => target = Some(self.lower_target(pair)),
                Rule::split => (split, stage_layers) = self.lower_split(pair),
                Rule::headroom_choice => {
                    let name = pair.into_inner().nth(1).expect("headroom_choice has a name");
                    headroom = Some(self.lower_name(name));
                }
                rule => unreachable!("check child {rule:?}"),
            }
        }
        let workload = workload.expect("a check names its workload");
        let target = target.expect("a check has a target");
        let end = last_part(headroom.as_ref(), &stage_layers, &split, Some(&target))
            .expect("a check has a target");
        let span = Span { start: span.start, end: end.end };
        Check { title, workload, also, target, split, stage_layers, headroom, span }
    }

    fn lower_find(&mut self, pair: Pair<'_>) -> Find {
        let span = self.span(&pair);
        let mut goal = None;
        let mut workload = None;
        let mut target = None;
        let mut split = Vec::new();
        let mut stage_layers = Vec::new();
        let mut headroom = None;
        for pair in pair.into_inner() {
            match pair.as_rule() {
                Rule::keyword_find | Rule::keyword_for | Rule::keyword_on => {}
                Rule::find_goal => goal = Some(self.lower_find_goal(pair)),
                Rule::name => workload = Some(self.lower_name(pair)),
                Rule::target => target = Some(self.lower_target(pair)),
                Rule::split => (split, stage_layers) = self.lower_split(pair),
                Rule::headroom_choice => {
                    let name = pair.into_inner().nth(1).expect("headroom_choice has a name");
                    headroom = Some(self.lower_name(name));
                }
                rule => unreachable!("find child {rule:?}"),
            }
        }
        let goal = goal.expect("a find has a goal");
        let workload = workload.expect("a find names its workload");
        let end = last_part(headroom.as_ref(), &stage_layers, &split, target.as_ref())
            .unwrap_or(workload.span);
        let span = Span { start: span.start, end: end.end };
        Find { goal, workload, target, split, stage_layers, headroom, span }
    }

    fn lower_find_goal(&mut self, pair: Pair<'_>) -> FindGoal {
        let inner = pair.into_inner().next().expect("find_goal has one child");
        match inner.as_rule() {
            Rule::find_max => {
                let name = inner.into_inner().nth(1).expect("find_max has a name");
                FindGoal::Max(self.lower_name(name))
            }
            Rule::find_min => {
                let mut names = inner.into_inner().filter(|p| p.as_rule() == Rule::name);
                let what = self.lower_name(names.next().expect("find_min names what"));
                let of = self.lower_name(names.next().expect("find_min names a device"));
                FindGoal::Min { what, of }
            }
            Rule::find_in => {
                let mut names = inner.into_inner().filter(|p| p.as_rule() == Rule::name);
                let what = self.lower_name(names.next().expect("find_in names what"));
                let collection = self.lower_name(names.next().expect("find_in names where"));
                FindGoal::In { what, collection }
            }
            Rule::name => FindGoal::Word(self.lower_name(inner)),
            rule => unreachable!("find_goal child {rule:?}"),
        }
    }

    fn lower_target(&mut self, pair: Pair<'_>) -> Target {
        let inner = pair.into_inner().next().expect("target has one child");
        match inner.as_rule() {
            Rule::count_of => Target::Count(self.lower_count_of(inner)),
            Rule::name => Target::Named(self.lower_name(inner)),
            rule => unreachable!("target child {rule:?}"),
        }
    }

    /// The split's parts, and the declared layers per stage (empty when not given).
    fn lower_split(&mut self, pair: Pair<'_>) -> (Vec<SplitPart>, Vec<Expr>) {
        let mut parts = Vec::new();
        let mut layers = Vec::new();
        let mut inner = pair.into_inner();
        inner.next(); // the `split` keyword
        while let Some(strategy) = inner.next() {
            if strategy.as_rule() == Rule::stage_layers {
                layers = strategy
                    .into_inner()
                    .skip(1) // the `layers` keyword
                    .map(|expr| self.lower_expr(expr))
                    .collect();
                break;
            }
            let strategy = self.lower_name(strategy);
            let degree = self.lower_expr(next(&mut inner));
            parts.push(SplitPart { strategy, degree });
        }
        (parts, layers)
    }

    fn lower_block(&mut self, pair: Pair<'_>) -> Block {
        let span = self.span(&pair);
        let fields = pair.into_inner().map(|field| self.lower_field(field)).collect();
        Block { fields, span }
    }

    fn lower_field(&mut self, pair: Pair<'_>) -> Field {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let key = self.lower_name(next(&mut inner));
        let mut values = Vec::new();
        let mut block = None;
        for pair in inner {
            match pair.as_rule() {
                Rule::string => values.push(Value::Text(self.lower_string(pair))),
                Rule::count_of => values.push(Value::Count(self.lower_count_of(pair))),
                Rule::expr => values.push(Value::Expr(self.lower_expr(pair))),
                Rule::word => {
                    let name = pair.into_inner().next().expect("word wraps a name");
                    values.push(Value::Word(self.lower_name(name)));
                }
                Rule::block => block = Some(self.lower_block(pair)),
                rule => unreachable!("field child {rule:?}"),
            }
        }
        // Pest's span would include trivia skipped while looking for more values; end the
        // field at its last value or block instead, so trailing comments stay outside it.
        let end = block
            .as_ref()
            .map(|b| b.span)
            .or_else(|| values.last().map(Value::span))
            .unwrap_or(key.span);
        let span = Span { start: span.start, end: end.end };
        Field { key, values, block, span }
    }

    fn lower_count_of(&mut self, pair: Pair<'_>) -> CountOf {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let count = self.lower_expr(next(&mut inner));
        inner.next(); // `x`
        let name = self.lower_name(next(&mut inner));
        CountOf { count, name, span }
    }

    #[allow(clippy::needless_pass_by_value, reason = "one signature for every lower_* function")]
    fn lower_name(&mut self, pair: Pair<'_>) -> Ident {
        Ident { name: pair.as_str().to_string(), span: self.span(&pair) }
    }

    fn lower_title(&mut self, pair: Pair<'_>) -> Text {
        self.lower_string(pair.into_inner().next().expect("title wraps a string"))
    }

    fn lower_string(&mut self, pair: Pair<'_>) -> Text {
        let span = self.span(&pair);
        let content = pair.into_inner().next().map_or("", |p| p.as_str());
        let mut value = String::with_capacity(content.len());
        let mut escaped = false;
        for c in content.chars() {
            if escaped || c != '\\' {
                value.push(c);
                escaped = false;
            } else {
                escaped = true;
            }
        }
        Text { value, span }
    }

    fn lower_expr(&mut self, pair: Pair<'_>) -> Expr {
        // A long chain nests one tree level per operator, and the tree is walked recursively
        // (here by the precedence climbing below, later by the checker and the formatter):
        // bound it first.
        if pair.descendants() > MAX_EXPRESSION_TERMS {
            let span = self.span(&pair);
            self.diagnostics.push(expression_too_long(span));
            // `value: None` marks the expression as reported; the checker re-derives the same
            // diagnostic from `raw` (see `literal_diagnostic`), and the final dedup drops it.
            return Expr::Number { value: None, raw: pair.as_str().to_string(), span };
        }
        let mut tokens = pair.into_inner().peekable();
        self.sum(&mut tokens)
    }

    // Precedence climbing over the expression's flat token list (the grammar's `expr`): `+ -`
    // bind loosest, then `* /`, then unary minus, then units (`-3 GiB` is `-(3 GiB)`); binary
    // operators associate to the left. Depth is bounded by the term limit checked above.

    fn sum(&mut self, tokens: &mut Tokens<'_>) -> Expr {
        self.chain(tokens, [(Rule::add, BinaryOp::Add), (Rule::sub, BinaryOp::Sub)], Self::product)
    }

    fn product(&mut self, tokens: &mut Tokens<'_>) -> Expr {
        self.chain(tokens, [(Rule::mul, BinaryOp::Mul), (Rule::div, BinaryOp::Div)], Self::unary)
    }

    /// Operands of one precedence level joined, left to right, by its operators.
    fn chain(
        &mut self,
        tokens: &mut Tokens<'_>,
        ops: [(Rule, BinaryOp); 2],
        operand: fn(&mut Self, &mut Tokens<'_>) -> Expr,
    ) -> Expr {
        let mut lhs = operand(self, tokens);
        let op_of = |token: &Pair<'_>| {
            ops.iter().find(|(rule, _)| token.as_rule() == *rule).map(|(_, op)| *op)
        };
        while let Some(op) = tokens.peek().and_then(op_of) {
            tokens.next();
            let rhs = operand(self, tokens);
            let span = lhs.span().to(rhs.span());
            lhs = Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs), span };
        }
        lhs
    }

    fn unary(&mut self, tokens: &mut Tokens<'_>) -> Expr {
        if let Some(op) = next_if(tokens, Rule::neg) {
            let operand = self.unary(tokens);
            let span = self.span(&op).to(operand.span());
            return Expr::Neg { operand: Box::new(operand), span };
        }
        let mut operand = self.primary(tokens);
        while let Some(op) = next_if(tokens, Rule::unit) {
            let span = operand.span().to(self.span(&op));
            let unit = Unit::from_text(op.as_str()).expect("the grammar accepts known units");
            operand = Expr::Unit { operand: Box::new(operand), unit, span };
        }
        operand
    }

    fn primary(&mut self, tokens: &mut Tokens<'_>) -> Expr {
        let primary = tokens.next().expect("the grammar puts a primary after every operator");
        let span = self.span(&primary);
        match primary.as_rule() {
            Rule::number => {
                let raw = primary.as_str().to_string();
                let value = match parse_number(&raw) {
                    Ok(value) => Some(value),
                    Err(message) => {
                        self.diagnostics.push(number_diagnostic(message, span));
                        None
                    }
                };
                Expr::Number { value, raw, span }
            }
            Rule::group => {
                let inner = primary.into_inner().next().expect("group holds an expr");
                let inner = self.lower_expr(inner);
                Expr::Group { inner: Box::new(inner), span }
            }
            rule => unreachable!("primary {rule:?}"),
        }
    }
}

/// An expression's tokens, in order.
type Tokens<'t> = std::iter::Peekable<Pairs<'t>>;

/// The next token, taken if its rule is `rule`.
fn next_if<'t>(tokens: &mut Tokens<'t>, rule: Rule) -> Option<Pair<'t>> {
    tokens.next_if(|token| token.as_rule() == rule)
}

/// The diagnostic for a literal that [`parse_number`] rejects.
pub(crate) fn number_diagnostic(message: String, span: Span) -> Diagnostic {
    Diagnostic::error("E003", span, message).with_help(format!(
        "numbers have at most {MAX_DIGITS} digits and an exponent of at most 30; write large counts with a scale word such as `billion`"
    ))
}

/// The diagnostic for an expression over [`MAX_EXPRESSION_TERMS`].
fn expression_too_long(span: Span) -> Diagnostic {
    Diagnostic::error(
        "E002",
        span,
        format!(
            "this expression is longer than the limit of {MAX_EXPRESSION_TERMS} terms (numbers, operators, units and parentheses)"
        ),
    )
    .with_help("compute the value outside the file and write the result")
}

/// The diagnostic of an expression lowered without a value (`Expr::Number { value: None }`):
/// a number literal that cannot be represented, or an expression over the length limit.
pub(crate) fn literal_diagnostic(raw: &str, span: Span) -> Diagnostic {
    let literal = raw
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'e' | b'E' | b'+' | b'-'))
        && raw.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && !raw
            .bytes()
            .skip(1)
            .zip(raw.bytes())
            .any(|(b, before)| matches!(b, b'+' | b'-') && !matches!(before, b'e' | b'E'));
    match parse_number(raw) {
        Err(message) if literal => number_diagnostic(message, span),
        _ => expression_too_long(span),
    }
}

/// Parses a number literal exactly: `1_000`, `8.9`, `1.5e9`.
pub(crate) fn parse_number(raw: &str) -> Result<Ratio, String> {
    let text: String = raw.chars().filter(|&c| c != '_').collect();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text.as_str(), None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return Err(format!("`{raw}` has more than {MAX_DIGITS} significant digits"));
    }
    let too_big = || format!("`{raw}` is too large to represent");
    let numerator: i128 =
        if significant.is_empty() { 0 } else { significant.parse().map_err(|_| too_big())? };
    let fraction_digits = u32::try_from(fraction.len()).map_err(|_| too_big())?;
    let mut value = Ratio::int(numerator)
        .checked_div(Ratio::pow10(fraction_digits).ok_or_else(too_big)?)
        .ok_or_else(too_big)?;
    if let Some(exponent) = exponent {
        let exponent: i32 = exponent.parse().map_err(|_| too_big())?;
        if exponent.unsigned_abs() > 30 {
            return Err(format!("the exponent of `{raw}` is outside -30..=30"));
        }
        let scale = Ratio::pow10(exponent.unsigned_abs()).ok_or_else(too_big)?;
        value = if exponent >= 0 { value.checked_mul(scale) } else { value.checked_div(scale) }
            .ok_or_else(too_big)?;
    }
    Ok(value)
}

/// The span of the last part a `check` or `find` wrote, in the order the grammar puts them:
/// headroom, then stage layers, then the split, then the target.
fn last_part(
    headroom: Option<&Ident>,
    stage_layers: &[Expr],
    split: &[SplitPart],
    target: Option<&Target>,
) -> Option<Span> {
    headroom
        .map(|h| h.span)
        .or_else(|| stage_layers.last().map(Expr::span))
        .or_else(|| split.last().map(|p| p.degree.span()))
        .or_else(|| {
            target.map(|t| match t {
                Target::Count(count) => count.span,
                Target::Named(name) => name.span,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::parse_number;
    use crate::ast::{Declaration, Expr, Value};
    use crate::ratio::Ratio;

    /// The tree of the first field's expression, parenthesized.
    fn tree(value: &str) -> String {
        fn show(expr: &Expr) -> String {
            match expr {
                Expr::Number { raw, .. } => raw.clone(),
                Expr::Neg { operand, .. } => format!("(-{})", show(operand)),
                Expr::Unit { operand, unit, .. } => format!("({} {})", show(operand), unit.text()),
                Expr::Binary { op, lhs, rhs, .. } => {
                    format!("({} {} {})", show(lhs), op.symbol(), show(rhs))
                }
                Expr::Group { inner, .. } => format!("[{}]", show(inner)),
            }
        }
        let (file, diagnostics) = crate::syntax::parse(&format!("device d {{ memory {value} }}"));
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        let Some(Declaration::Block(block)) = file.declarations.first() else { panic!("a block") };
        let Some(Value::Expr(expr)) = block.body.fields[0].values.first() else { panic!("expr") };
        show(expr)
    }

    #[test]
    fn units_bind_tightest_then_minus_then_products_then_sums() {
        assert_eq!(tree("-2 * 3 + 4 GiB / 2 - 1"), "((((-2) * 3) + ((4 GiB) / 2)) - 1)");
        assert_eq!(tree("-3 GiB"), "(-(3 GiB))");
        assert_eq!(tree("- -1"), "(-(-1))");
        assert_eq!(tree("8 / 4 / 2"), "((8 / 4) / 2)");
        assert_eq!(tree("(4 + 4) KiB * 2"), "(([(4 + 4)] KiB) * 2)");
    }

    #[test]
    fn numbers_are_exact() {
        assert_eq!(parse_number("81_559"), Ok(Ratio::int(81_559)));
        assert_eq!(parse_number("8.9"), Ratio::new(89, 10).ok_or(String::new()));
        assert_eq!(parse_number("1.5e9"), Ok(Ratio::int(1_500_000_000)));
        assert_eq!(parse_number("25e-1"), Ratio::new(5, 2).ok_or(String::new()));
        assert_eq!(parse_number("0007"), Ok(Ratio::int(7)));
        assert!(parse_number("1234567890123456789012345678901").is_err());
        assert!(parse_number("1e31").is_err());
    }
}
