package sql

// CreateUser is CREATE USER name [WITH] [PASSWORD '...'] [ADMIN].
type CreateUser struct {
	Name     string
	Password string // as written: a password, or a SCRAM verifier
	HasPass  bool
	Admin    bool
}

// AlterUser is ALTER USER name [WITH] {PASSWORD '...' | ADMIN | NOADMIN}...
type AlterUser struct {
	Name     string
	Password string
	HasPass  bool
	Admin    *bool // nil: unchanged
}

// DropUser is DROP USER [IF EXISTS] name.
type DropUser struct {
	Name     string
	IfExists bool
}

func (*CreateUser) statement() {}
func (*AlterUser) statement()  {}
func (*DropUser) statement()   {}

// userOptions reads the option list of CREATE/ALTER USER (ROLE): PASSWORD
// 'text', ADMIN or NOADMIN (SUPERUSER and NOSUPERUSER, PostgreSQL's
// spelling, mean the same), LOGIN (always true, accepted for scripts
// written for PostgreSQL).
func (p *stmtParser) userOptions() (pass string, hasPass bool, admin *bool, err error) {
	p.accept("WITH")
	for {
		t := p.peek()
		switch {
		case t.Kind == TokEOF || t.Is(";"):
			return pass, hasPass, admin, nil
		case t.Is("PASSWORD"):
			p.next()
			v := p.next()
			if v.Kind != TokString {
				return "", false, nil, p.errAt(v, "expected a quoted password after PASSWORD")
			}
			if v.Text == "" {
				return "", false, nil, Errorf(CodeInvalidParameter, "the password must not be empty").WithPos(charPos(p.src, v.Start))
			}
			pass, hasPass = v.Text, true
		case t.Is("ADMIN"), t.Is("SUPERUSER"):
			p.next()
			yes := true
			admin = &yes
		case t.Is("NOADMIN"), t.Is("NOSUPERUSER"):
			p.next()
			no := false
			admin = &no
		case t.Is("LOGIN"):
			p.next()
		default:
			return "", false, nil, p.errAt(t, "expected PASSWORD, ADMIN or NOADMIN")
		}
	}
}

func (p *stmtParser) createUser() (Statement, error) {
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	pass, hasPass, admin, err := p.userOptions()
	if err != nil {
		return nil, err
	}
	return &CreateUser{Name: name, Password: pass, HasPass: hasPass, Admin: admin != nil && *admin}, p.atEnd()
}

func (p *stmtParser) alterUser() (Statement, error) {
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	pass, hasPass, admin, err := p.userOptions()
	if err != nil {
		return nil, err
	}
	if !hasPass && admin == nil {
		return nil, p.errAt(p.peek(), "expected PASSWORD, ADMIN or NOADMIN")
	}
	return &AlterUser{Name: name, Password: pass, HasPass: hasPass, Admin: admin}, p.atEnd()
}

func (p *stmtParser) dropUser() (Statement, error) {
	d := &DropUser{IfExists: p.accept("IF", "EXISTS")}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	d.Name = name
	return d, p.atEnd()
}
