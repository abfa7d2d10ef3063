"""The rules and the finding types: each rule turns an Analysis into typed findings (``types``,
``checks``), what each finding rests on (``basis``) and costs (``cost``), and their thresholds."""
