package scope

// links are an element's place on a list: its neighbours' links, and the
// element itself.
type links[T any] struct {
	prev, next *links[T]
	elem       *T // the element that holds these links, set as it joins a list
}

// list is a list of elements linked through links they hold, oldest first,
// so that an element leaves it at no cost however many there are. It is
// guarded by the lock of whoever holds it.
type list[T any] struct {
	head, tail *links[T]
	n          int
}

// push appends e, whose links are el.
func (l *list[T]) push(e *T, el *links[T]) {
	el.elem, el.prev, el.next = e, l.tail, nil
	if l.tail != nil {
		l.tail.next = el
	} else {
		l.head = el
	}
	l.tail = el
	l.n++
}

// remove takes the element whose links are el off the list; one on no
// list is left as it is.
func (l *list[T]) remove(el *links[T]) {
	if el.prev != nil {
		el.prev.next = el.next
	} else if l.head == el {
		l.head = el.next
	} else {
		return // not on the list
	}
	if el.next != nil {
		el.next.prev = el.prev
	} else {
		l.tail = el.prev
	}
	el.prev, el.next = nil, nil
	l.n--
}

// scopeList is a list of scopes: a node's children, a tree's roots.
type scopeList = list[node]

// slotList is the live allocations a scope owns.
type slotList = list[slot]

// resourceList is the resources a scope owns.
type resourceList = list[resource]

// handles returns handles to the scopes on l, oldest first. Called with the
// list owner's mu held.
func handles(l *scopeList) []Scope {
	out := make([]Scope, 0, l.n)
	for x := l.head; x != nil; x = x.next {
		out = append(out, x.elem.handle())
	}
	return out
}
