"""One table, printed as Markdown or — with `--json` — as the JSON a results page's `{{table NAME}}`
directive reads (sim/scripts/results_md.py): {"command", "load", "columns", "align", "rows"}."""
import json
import sys


def emit(columns, left, rows, command, load):
    """Print `rows` under `columns` (the first `left` columns left-aligned, the rest right-aligned)."""
    align = ["l"] * left + ["r"] * (len(columns) - left)
    if "--json" in sys.argv[1:]:
        doc = {"command": command, "load": load, "columns": columns, "align": align, "rows": rows}
        print(json.dumps(doc, indent=1, ensure_ascii=False))
        return
    sep = {"l": "---", "r": "---:"}
    print("\n".join(["| " + " | ".join(columns) + " |", "|" + "|".join(sep[a] for a in align) + "|"]
                    + ["| " + " | ".join(row) + " |" for row in rows]))
