package scope

// links are an element's neighbours on a list.
type links[T any] struct {
	prev, next *T
}

// linked is what a list holds: a pointer to an element that carries its
// own links.
type linked[T any] interface {
	*T
	listLinks() *links[T]
}

// list is a list of elements linked through their own links, oldest first,
// so that an element leaves it at no cost however many there are. It is
// guarded by the lock of whoever holds it.
type list[T any, P linked[T]] struct {
	head, tail *T
	n          int
}

// push appends e.
func (l *list[T, P]) push(e *T) {
	el := P(e).listLinks()
	el.prev, el.next = l.tail, nil
	if l.tail != nil {
		P(l.tail).listLinks().next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

// remove takes e off the list; an e on no list is left as it is.
func (l *list[T, P]) remove(e *T) {
	el := P(e).listLinks()
	if el.prev != nil {
		P(el.prev).listLinks().next = el.next
	} else if l.head == e {
		l.head = el.next
	} else {
		return // not on the list
	}
	if el.next != nil {
		P(el.next).listLinks().prev = el.prev
	} else {
		l.tail = el.prev
	}
	el.prev, el.next = nil, nil
	l.n--
}

// scopeList is a list of scopes: a node's children, a tree's roots.
type scopeList = list[node, *node]

// slotList is the live allocations a scope owns.
type slotList = list[slot, *slot]

// resourceList is the resources a scope owns.
type resourceList = list[resource, *resource]

// handles returns handles to the scopes on l, oldest first. Called with the
// list owner's mu held.
func handles(l *scopeList) []Scope {
	out := make([]Scope, 0, l.n)
	for s := l.head; s != nil; s = s.siblings.next {
		out = append(out, s.handle())
	}
	return out
}
