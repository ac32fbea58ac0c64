"""Help text the command line's options share, apart from the code behind them: every command's
--help is built at start-up, and the modules that do the work (advisor/net.py and the HTTP stack
under it) are loaded only when a command runs."""

CREDENTIALS_HELP = ("Credentials: user:password@ in the URL (never printed or stored), or "
                    "ADVISOR_{P}_USER with ADVISOR_{P}_PASSWORD or ADVISOR_{P}_PASSWORD_FILE (basic auth), or "
                    "ADVISOR_{P}_TOKEN or ADVISOR_{P}_TOKEN_FILE (bearer token).")
PROM_CREDENTIALS_HELP = CREDENTIALS_HELP.format(P="PROM")
ENGINE_CREDENTIALS_HELP = CREDENTIALS_HELP.format(P="ENGINE")
