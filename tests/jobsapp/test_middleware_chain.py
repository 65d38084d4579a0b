"""The middleware chain: Sidekiq's add/remove/prepend/insert_before/insert_after."""

from jobsapp.middleware import Chain


class A: ...


class B: ...


class C: ...


def test_chain_ordering_operations():
    chain = Chain()
    chain.add(A)
    chain.add(B)
    chain.prepend(C)
    assert chain.classes() == [C, A, B]
    chain.insert_after(C, B)
    assert chain.classes() == [C, B, A]
    chain.insert_before(C, A)
    assert chain.classes() == [A, C, B]
    chain.remove(C)
    assert chain.classes() == [A, B] and C not in chain and A in chain
    chain.add(A)
    assert chain.classes() == [B, A]
    first = chain.instances()
    assert chain.instances() is first
    chain.clear()
    assert len(chain) == 0
