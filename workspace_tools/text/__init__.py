"""Text as bytes: decoding and encodings, newlines, line windows, editorconfig, unified diffs
(difflib) and edit matching (exact, then fallbacks with a uniqueness check)."""
