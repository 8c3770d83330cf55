from cudump.cli import main

raise SystemExit(main())
