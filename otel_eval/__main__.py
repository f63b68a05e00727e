from otel_eval.app.cli import main

raise SystemExit(main())
