import {AbsoluteFill, useCurrentFrame} from 'remotion';

// Throws deterministically at frame `atFrame`: used to test permanent errors.
export type FailingProps = {
	atFrame: number;
	reason: string;
};

export const Failing: React.FC<FailingProps> = ({atFrame, reason}) => {
	const frame = useCurrentFrame();
	if (frame >= atFrame) {
		throw new Error('Intentional failure: ' + reason);
	}
	return (
		<AbsoluteFill style={{backgroundColor: '#334155', color: 'white'}}>
			{frame}
		</AbsoluteFill>
	);
};
