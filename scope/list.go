package scope

// scopeList is a list of scopes, linked through their prevSib and nextSib,
// so that a scope leaves it at no cost however many there are.
type scopeList struct {
	head, tail *node
	n          int
}

func (l *scopeList) push(s *node) {
	s.prevSib, s.nextSib = l.tail, nil
	if l.tail != nil {
		l.tail.nextSib = s
	} else {
		l.head = s
	}
	l.tail = s
	l.n++
}

func (l *scopeList) remove(s *node) {
	if s.prevSib != nil {
		s.prevSib.nextSib = s.nextSib
	} else if l.head == s {
		l.head = s.nextSib
	} else {
		return // not on the list
	}
	if s.nextSib != nil {
		s.nextSib.prevSib = s.prevSib
	} else {
		l.tail = s.prevSib
	}
	s.prevSib, s.nextSib = nil, nil
	l.n--
}

// handles returns handles to the scopes on the list, oldest first. Called
// with the list owner's mu held.
func (l *scopeList) handles() []Scope {
	out := make([]Scope, 0, l.n)
	for s := l.head; s != nil; s = s.nextSib {
		out = append(out, s.handle())
	}
	return out
}
