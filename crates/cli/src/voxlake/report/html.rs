//! One self-contained HTML page: inline style and SVG, a policy that lets it load nothing, and
//! the figures it was drawn from kept in it as JSON, for `voxlake report merge` to read back.

/// Opens the JSON block a page keeps its figures in.
const DATA_OPEN: &str = r#"<script type="application/json" id="voxlake-report">"#;

/// Closes it.
const DATA_CLOSE: &str = "</script>";

/// The most bytes of a report file read back (a rank's page of 1,024 points is ~0.3 MB).
pub(super) const MAX_PAGE_BYTES: u64 = 64 << 20;

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:800px;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
.warn{background:#fff3cd;padding:6px 10px;border-left:4px solid #d39e00}\
.flag{color:#c00;font-weight:bold}svg{display:block;max-width:100%;height:auto}";

/// `text` for an HTML text node or a quoted attribute.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page: `title` (plain text), `body` (HTML), and `data` kept in it as JSON.
pub(super) fn page(title: &str, body: &str, data: &serde_json::Value) -> String {
    // '<' occurs in JSON only inside strings, where \u003c means the same: no string of a
    // table's name can end the block or start markup.
    let json = data.to_string().replace('<', "\\u003c");
    let title = escape(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>{title}</title><style>{STYLE}</style></head>\n<body>\n<h1>{title}</h1>\n{body}\n\
         {DATA_OPEN}{json}{DATA_CLOSE}\n</body></html>\n"
    )
}

/// A section: a heading, then `content` (HTML).
pub(super) fn section(id: &str, heading: &str, content: &str) -> String {
    format!(
        "<section id=\"{}\"><h2>{}</h2>\n{content}\n</section>\n",
        escape(id),
        escape(heading)
    )
}

/// A table of `header` and `rows`, each cell plain text; numbers (cells that parse as one,
/// ignoring a unit) right-aligned; the rows `flagged` says are drawn red.
pub(super) fn table(header: &[&str], rows: &[Vec<String>], flagged: &[bool]) -> String {
    let mut html = String::from("<table><tr>");
    for h in header {
        html.push_str(&format!("<th>{}</th>", escape(h)));
    }
    html.push_str("</tr>\n");
    for (i, row) in rows.iter().enumerate() {
        html.push_str(if flagged.get(i) == Some(&true) {
            "<tr class=\"flag\">"
        } else {
            "<tr>"
        });
        for cell in row {
            let numeric = cell.split_whitespace().next().is_some_and(|w| {
                w.trim_end_matches(['k', 'M', 'G', '%'])
                    .parse::<f64>()
                    .is_ok()
            });
            let class = if numeric { " class=\"n\"" } else { "" };
            html.push_str(&format!("<td{class}>{}</td>", escape(cell)));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>");
    html
}

/// The figures a page keeps: `None` where `html` has no block of them (not a voxlake page).
pub(super) fn data_of(html: &str) -> Option<Result<serde_json::Value, serde_json::Error>> {
    let start = html.find(DATA_OPEN)? + DATA_OPEN.len();
    let len = html[start..].find(DATA_CLOSE)?;
    Some(serde_json::from_str(&html[start..start + len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_its_figures_whatever_their_strings_hold() {
        let data = serde_json::json!({
            "table": "</script><script>alert(1)</script><!--",
            "samples": 3,
        });
        let html = page("a <b> & 'c'", "<p>body</p>", &data);
        assert!(html.contains("<title>a &lt;b&gt; &amp; &#39;c&#39;</title>"));
        assert_eq!(html.matches("</script>").count(), 1, "{html}");
        assert!(!html.contains("<script>alert"));
        assert_eq!(data_of(&html).unwrap().unwrap(), data);
        assert!(data_of("<html></html>").is_none());
        let broken = html.replace("\"samples\":3", "\"samples\":");
        assert!(data_of(&broken).unwrap().is_err());
    }

    #[test]
    fn tables_escape_cells_and_align_numbers() {
        let html = table(
            &["rank", "wait"],
            &[
                vec!["0".into(), "1.20 s".into()],
                vec!["<x>".into(), "n/a".into()],
            ],
            &[false, true],
        );
        assert!(html.contains("<td class=\"n\">1.20 s</td>"), "{html}");
        assert!(html.contains("<tr class=\"flag\"><td>&lt;x&gt;</td><td>n/a</td>"));
    }
}
