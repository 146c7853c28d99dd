//! Source locations and compiler diagnostics, rendered as `file:line:col: error: message`
//! followed by the offending source line and a caret under the column.

use std::fmt;

/// A byte range in one source file.
///
/// Spans never take part in equality of syntax trees: two trees that differ only in where
/// their pieces were written compare equal, which is what the pretty-printer round trip needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

impl PartialEq for Span {
    fn eq(&self, _other: &Span) -> bool {
        true
    }
}

impl Eq for Span {}

/// One source file: its display name and text, with the line index needed to turn byte
/// offsets into 1-based line and column numbers.
#[derive(Debug, Clone)]
pub struct SourceFile {
    name: String,
    text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile {
            name: name.into(),
            text,
            line_starts,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line];
        let column = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count());
        (line + 1, column + 1)
    }

    /// The text of a 1-based line, without its line break.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |&next| next.saturating_sub(1));
        self.text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches('\r')
    }
}

/// One problem found in a source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub span: Span,
    pub message: String,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            span,
            message: message.into(),
        }
    }
}

/// Every problem found in one file, in source order, with the file so they can be rendered.
#[derive(Debug, Clone)]
pub struct Diagnostics {
    pub file: SourceFile,
    pub items: Vec<Diagnostic>,
}

/// A diagnostic resolved to its position, for tests and tools that want fields, not text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Diagnostics {
    pub fn located(&self) -> Vec<Located> {
        self.items
            .iter()
            .map(|d| {
                let (line, column) = self.file.line_col(d.span.start);
                Located {
                    line,
                    column,
                    message: d.message.clone(),
                }
            })
            .collect()
    }
}

impl std::error::Error for Diagnostics {}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let (line, column) = self.file.line_col(d.span.start);
            let text = self.file.line_text(line);
            writeln!(
                f,
                "{}:{}:{}: error: {}",
                self.file.name(),
                line,
                column,
                d.message
            )?;
            // Tabs keep their width so the caret lines up under the column in a terminal.
            let pad: String = text
                .chars()
                .take(column - 1)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let (end_line, end_column) = self.file.line_col(d.span.end.max(d.span.start + 1));
            let width = if end_line == line && end_column > column {
                end_column - column
            } else {
                1
            };
            writeln!(f, "    {text}")?;
            write!(f, "    {pad}{}", "^".repeat(width))?;
        }
        Ok(())
    }
}
