"""The engine: plan, run, judge, shrink; the order of an audit lives here."""
