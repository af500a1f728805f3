//! The typed syntax tree: what the file says, with a span on every node.
//!
//! This layer is generic on purpose. A block is a list of fields (key, values, optional nested
//! block) whatever its kind; which keys a `model` accepts is the `check` pass's business. Keeping
//! the tree generic lets `vram fmt` print any parseable file, and lets `check` report every
//! unknown or misspelt field with a suggestion instead of a single parser error.

use crate::ratio::Ratio;
use crate::span::Span;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct File {
    pub declarations: Vec<Declaration>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declaration {
    Block(BlockDeclaration),
    Check(Check),
    Find(Find),
}

impl Declaration {
    pub fn span(&self) -> Span {
        match self {
            Declaration::Block(decl) => decl.span,
            Declaration::Check(check) => check.span,
            Declaration::Find(find) => find.span,
        }
    }
}

/// The kinds of block declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeclarationKind {
    Device,
    Machine,
    Model,
    Workload,
    Headroom,
}

impl DeclarationKind {
    pub fn keyword(self) -> &'static str {
        match self {
            DeclarationKind::Device => "device",
            DeclarationKind::Machine => "machine",
            DeclarationKind::Model => "model",
            DeclarationKind::Workload => "workload",
            DeclarationKind::Headroom => "headroom",
        }
    }
}

/// `model llama3-8b "Llama 3.1 8B" { ... }`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDeclaration {
    pub kind: DeclarationKind,
    pub name: Ident,
    pub title: Option<Text>,
    pub body: Block,
    pub span: Span,
}

/// `check "title" chat on 2 x h100 split tensor 2 headroom strict`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub title: Option<Text>,
    pub workload: Ident,
    /// Workloads sharing the devices with `workload`: `check llm + embedder on l40s`.
    pub also: Vec<Ident>,
    pub target: Target,
    pub split: Vec<SplitPart>,
    /// `layers 24 56` after the split: declared layers per pipeline stage.
    pub stage_layers: Vec<Expr>,
    pub headroom: Option<Ident>,
    pub span: Span,
}

/// `find max sessions for chat on l4 split tensor 1 headroom strict`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Find {
    pub goal: FindGoal,
    pub workload: Ident,
    /// `on TARGET`, which some goals need and others refuse (the checker decides).
    pub target: Option<Target>,
    pub split: Vec<SplitPart>,
    /// `layers 24 56` after the split: declared layers per pipeline stage.
    pub stage_layers: Vec<Expr>,
    pub headroom: Option<Ident>,
    pub span: Span,
}

/// What a `find` looks for. The words are checked by the checker, not the grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindGoal {
    /// `max sessions`
    Max(Ident),
    /// `min gpus of l4`
    Min { what: Ident, of: Ident },
    /// `machines in catalog`
    In { what: Ident, collection: Ident },
    /// `precision`
    Word(Ident),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `2 x h100-sxm-80gb`
    Count(CountOf),
    /// `l4` or `dgx-h100`: a device (one of it) or a machine.
    Named(Ident),
}

/// `tensor 2` inside `split tensor 2 pipeline 2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPart {
    pub strategy: Ident,
    pub degree: Expr,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Block {
    pub fields: Vec<Field>,
    pub span: Span,
}

/// One line of a block: `key value... { nested }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub key: Ident,
    pub values: Vec<Value>,
    pub block: Option<Block>,
    pub span: Span,
}

impl Field {
    /// The span of the values (or of the key when there are none).
    pub fn values_span(&self) -> Span {
        match (self.values.first(), self.values.last()) {
            (Some(first), Some(last)) => first.span().to(last.span()),
            _ => self.key.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Expr(Expr),
    Word(Ident),
    Text(Text),
    Count(CountOf),
}

impl Value {
    pub fn span(&self) -> Span {
        match self {
            Value::Expr(expr) => expr.span(),
            Value::Word(ident) => ident.span,
            Value::Text(text) => text.span,
            Value::Count(count) => count.span,
        }
    }
}

/// `8 x h100-sxm-80gb`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountOf {
    pub count: Expr,
    pub name: Ident,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A string literal with its escapes resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text {
    pub value: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// A literal, kept exact. `raw` is the text as written, for `vram fmt`. `value` is `None`
    /// when the literal cannot be represented (already reported while lowering).
    Number {
        value: Option<Ratio>,
        raw: String,
        span: Span,
    },
    Neg {
        operand: Box<Expr>,
        span: Span,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        span: Span,
    },
    /// `expr unit`: `4 B`, `(4 + 4) KiB`, `7 billion`.
    Unit {
        operand: Box<Expr>,
        unit: Unit,
        span: Span,
    },
    /// `( expr )`, kept so that `vram fmt` prints the parentheses the author wrote.
    Group {
        inner: Box<Expr>,
        span: Span,
    },
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Number { span, .. }
            | Expr::Neg { span, .. }
            | Expr::Binary { span, .. }
            | Expr::Unit { span, .. }
            | Expr::Group { span, .. } => *span,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
        }
    }
}

/// A unit or scale word after a quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes, with the number of bytes one unit stands for.
    Bytes(u64, &'static str),
    Tokens,
    Percent,
    /// `thousand`, `million`, ...: a plain multiplier.
    Scale(u64, &'static str),
}

impl Unit {
    /// Parses the unit text the grammar accepted.
    pub fn from_text(text: &str) -> Option<Unit> {
        const K: u64 = 1000;
        const KI: u64 = 1024;
        Some(match text {
            "B" => Unit::Bytes(1, "B"),
            "byte" | "bytes" => Unit::Bytes(1, "bytes"),
            "KB" => Unit::Bytes(K, "KB"),
            "MB" => Unit::Bytes(K.pow(2), "MB"),
            "GB" => Unit::Bytes(K.pow(3), "GB"),
            "TB" => Unit::Bytes(K.pow(4), "TB"),
            "PB" => Unit::Bytes(K.pow(5), "PB"),
            "KiB" => Unit::Bytes(KI, "KiB"),
            "MiB" => Unit::Bytes(KI.pow(2), "MiB"),
            "GiB" => Unit::Bytes(KI.pow(3), "GiB"),
            "TiB" => Unit::Bytes(KI.pow(4), "TiB"),
            "PiB" => Unit::Bytes(KI.pow(5), "PiB"),
            "token" | "tokens" => Unit::Tokens,
            "%" => Unit::Percent,
            "thousand" => Unit::Scale(K, "thousand"),
            "million" => Unit::Scale(K.pow(2), "million"),
            "billion" => Unit::Scale(K.pow(3), "billion"),
            "trillion" => Unit::Scale(K.pow(4), "trillion"),
            _ => return None,
        })
    }

    pub fn text(self) -> &'static str {
        match self {
            Unit::Bytes(_, text) | Unit::Scale(_, text) => text,
            Unit::Tokens => "tokens",
            Unit::Percent => "%",
        }
    }
}
