package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/web"
)

// runUsers implements "console users add | list | disable | enable | reset-password".
func runUsers(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("users", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	email := fs.String("email", "", "the account's email (add)")
	role := fs.String("role", "viewer", "role (add): viewer, operator, support or admin")
	tenants := fs.String("tenants", "", `tenant scope (add): "all" or a comma-separated list`)
	noPassword := fs.Bool("no-password", false, "add an account that can only sign in through a trusted proxy")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console users add --email E --role R --tenants all|T1,T2 [--no-password]")
		fmt.Fprintln(stdout, "       console users list")
		fmt.Fprintln(stdout, "       console users disable|enable|reset-password EMAIL")
		fmt.Fprintln(stdout, "Manages console accounts. New and reset passwords are printed once; they are one-time")
		fmt.Fprintln(stdout, "passwords to hand to their owner, who must choose a new one at the first sign-in.")
		fmt.Fprintln(stdout, "Options:")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errors.New("users: want add, list, disable, enable or reset-password")
	}
	action := pos[0]
	switch action {
	case "add", "list":
		if len(pos) != 1 {
			return fmt.Errorf("users %s takes no argument", action)
		}
	case "disable", "enable", "reset-password":
		if len(pos) != 2 {
			return fmt.Errorf("users %s: want the account's email", action)
		}
	default:
		fs.Usage()
		return fmt.Errorf("users: unknown action %q", action)
	}
	store, done, err := openAuth(ctx, dbf)
	if err != nil {
		return err
	}
	defer done()
	by := cliActor(getenv)
	switch action {
	case "add":
		r, err := auth.ParseRole(*role)
		if err != nil {
			return err
		}
		sc, err := auth.ParseScope(*tenants)
		if err != nil {
			return fmt.Errorf("--tenants: %w", err)
		}
		a, pw, err := store.CreateAccount(ctx, by, auth.AllTenants, auth.NewAccount{Email: *email, Role: r, Scope: sc, NoPassword: *noPassword})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created %s (%s, tenants %s)\n", a.Email, a.Role, a.Scope)
		if pw != "" {
			fmt.Fprintf(stdout, "one-time password: %s\n", pw)
			fmt.Fprintln(stdout, "it must be changed at the first sign-in")
		}
	case "list":
		list, err := store.Accounts(ctx, auth.AllTenants)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEMAIL\tROLE\tTENANTS\tSTATE\tCREATED")
		for _, a := range list {
			state := "enabled"
			if a.Disabled {
				state = "disabled"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Email, a.Role, a.Scope, state, a.CreatedAt.UTC().Format("2006-01-02 15:04Z"))
		}
		return tw.Flush()
	default:
		a, err := store.AccountByEmail(ctx, pos[1])
		if errors.Is(err, auth.ErrNotFound) {
			return fmt.Errorf("users %s: no account %q", action, pos[1])
		}
		if err != nil {
			return err
		}
		switch action {
		case "disable", "enable":
			if _, err := store.SetDisabled(ctx, by, auth.AllTenants, a.ID, action == "disable"); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%sd %s\n", action, a.Email)
		case "reset-password":
			_, pw, err := store.ResetPassword(ctx, by, auth.AllTenants, a.ID)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "one-time password for %s: %s\n", a.Email, pw)
			fmt.Fprintln(stdout, "it must be changed at the first sign-in")
		}
	}
	return nil
}

// runTokens implements "console tokens create | list | revoke".
func runTokens(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tokens", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	name := fs.String("name", "", "the application the token is for (create)")
	tenants := fs.String("tenants", "", "comma-separated tenants the token may act for (create)")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console tokens create --name N --tenants T1,T2")
		fmt.Fprintln(stdout, "       console tokens list")
		fmt.Fprintln(stdout, "       console tokens revoke ID|PREFIX")
		fmt.Fprintln(stdout, "Manages API tokens for applications calling /api/v1. A new token is printed once;")
		fmt.Fprintln(stdout, "only its hash is stored.")
		fmt.Fprintln(stdout, "Options:")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errors.New("tokens: want create, list or revoke")
	}
	switch pos[0] {
	case "create", "list":
		if len(pos) != 1 {
			return fmt.Errorf("tokens %s takes no argument", pos[0])
		}
	case "revoke":
		if len(pos) != 2 {
			return errors.New("tokens revoke: want the token's id or prefix")
		}
	default:
		fs.Usage()
		return fmt.Errorf("tokens: unknown action %q", pos[0])
	}
	store, done, err := openAuth(ctx, dbf)
	if err != nil {
		return err
	}
	defer done()
	by := cliActor(getenv)
	switch pos[0] {
	case "create":
		sc, err := auth.ParseScope(*tenants)
		if err != nil {
			return fmt.Errorf("--tenants: %w", err)
		}
		t, secret, err := store.CreateToken(ctx, by, auth.AllTenants, *name, sc)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created token %d %q for tenants %s\n", t.ID, t.Name, t.Scope)
		fmt.Fprintf(stdout, "token (shown once): %s\n", secret)
	case "list":
		list, err := store.Tokens(ctx, auth.AllTenants)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tTENANTS\tSTATE\tCREATED\tLAST USED")
		for _, t := range list {
			state, used := "active", "never"
			if t.RevokedAt != nil {
				state = "revoked"
			}
			if t.LastUsedAt != nil {
				used = t.LastUsedAt.UTC().Format("2006-01-02 15:04Z")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, t.Scope, state, t.CreatedAt.UTC().Format("2006-01-02 15:04Z"), used)
		}
		return tw.Flush()
	case "revoke":
		t, err := store.TokenByRef(ctx, pos[1])
		if errors.Is(err, auth.ErrNotFound) {
			return fmt.Errorf("tokens revoke: no token %q", pos[1])
		}
		if err != nil {
			return err
		}
		if _, err := store.RevokeToken(ctx, by, auth.AllTenants, t.ID); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked token %d %q (%s)\n", t.ID, t.Name, t.Prefix)
	}
	return nil
}

// openAuth opens the database, brings its schema up to date and returns the account store.
func openAuth(ctx context.Context, dbf dbFlags) (*auth.Store, func(), error) {
	logger := slog.New(slog.DiscardHandler)
	db, err := openDatabase(ctx, dbf, logger)
	if err != nil {
		return nil, nil, err
	}
	if err := migrateUp(ctx, db.Pool, logger); err != nil {
		db.Close()
		return nil, nil, err
	}
	return auth.NewStore(db.Pool, auth.Options{}), db.Close, nil
}

// cliActor is who the audit log names for a command run on the host.
func cliActor(getenv func(string) string) audit.Actor {
	return audit.Actor{Name: "cli:" + envOr(getenv, "USER", "unknown"), Kind: audit.KindCLI}
}

// demoAccount is one account the embedded demo creates, with its one-time password.
type demoAccount struct {
	Email    string
	Role     auth.Role
	Scope    auth.Scope
	Password string
}

// demoAccounts are the embedded demo's accounts: one per role with every tenant, and a viewer
// of one tenant to show tenant scope.
var demoAccounts = []demoAccount{
	{Email: "viewer@demo", Role: auth.RoleViewer, Scope: auth.AllTenants},
	{Email: "operator@demo", Role: auth.RoleOperator, Scope: auth.AllTenants},
	{Email: "support@demo", Role: auth.RoleSupport, Scope: auth.AllTenants},
	{Email: "admin@demo", Role: auth.RoleAdmin, Scope: auth.AllTenants},
	{Email: "acme-viewer@demo", Role: auth.RoleViewer, Scope: auth.TenantScope("acme")},
}

// ensureDemoAccounts creates (or re-enables) the demo accounts with fresh one-time passwords.
func ensureDemoAccounts(ctx context.Context, store *auth.Store) ([]demoAccount, error) {
	by := audit.Actor{Name: "demo", Kind: audit.KindSystem}
	out := make([]demoAccount, 0, len(demoAccounts))
	for _, d := range demoAccounts {
		_, pw, err := store.EnsureAccount(ctx, by, auth.NewAccount{Email: d.Email, Role: d.Role, Scope: d.Scope})
		if err != nil {
			return nil, fmt.Errorf("demo account %s: %w", d.Email, err)
		}
		d.Password = pw
		out = append(out, d)
	}
	return out, nil
}

// printDemoAccounts writes the demo accounts and their one-time passwords in the start banner.
func printDemoAccounts(w io.Writer, accounts []demoAccount) {
	if len(accounts) == 0 {
		return
	}
	fmt.Fprintln(w, "  demo accounts (one-time passwords, new at every start):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, a := range accounts {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", a.Email, a.Role, a.Scope, a.Password)
	}
	_ = tw.Flush()
}

// trustedProxyFromEnv reads TASKGATE_TRUSTED_HEADER and TASKGATE_TRUSTED_PROXIES (addresses or
// CIDR prefixes, comma-separated). A header without proxies is refused: it would trust anyone.
// Proxies without a header are trusted for X-Forwarded-For and X-Forwarded-Proto only.
func trustedProxyFromEnv(getenv func(string) string) (web.TrustedProxy, error) {
	tp := web.TrustedProxy{Header: strings.TrimSpace(getenv("TASKGATE_TRUSTED_HEADER"))}
	for _, s := range strings.Split(getenv("TASKGATE_TRUSTED_PROXIES"), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			tp.Proxies = append(tp.Proxies, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return tp, fmt.Errorf("TASKGATE_TRUSTED_PROXIES: %q is not an address or prefix", s)
		}
		tp.Proxies = append(tp.Proxies, netip.PrefixFrom(a, a.BitLen()))
	}
	if tp.Header != "" && len(tp.Proxies) == 0 {
		return tp, errors.New("TASKGATE_TRUSTED_HEADER is set but TASKGATE_TRUSTED_PROXIES is empty")
	}
	return tp, nil
}
