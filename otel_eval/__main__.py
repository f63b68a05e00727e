from otel_eval.cli import main

raise SystemExit(main())
